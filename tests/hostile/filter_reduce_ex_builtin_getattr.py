# attack: issue 32: the copy protocol's reduce path with __reduce_ex__ set in a class namespace built at run time: copy calls whatever callable it returns, here the getattr a builtin method's own __reduce__ hands out as data, on a function and a name built at run time
# expect: error runtime_error:FileNotFoundError
# filter: banned:type
# calls: ["0"]
# ruff: noqa
import copy
def f(x):
    T = type('T', (), {'__reduce_' + 'ex__': lambda self, p: (g, (f, '__glo' + 'bals__'))})
    g = [].append.__reduce__()[0]  # the builtin getattr, as data
    globs = copy.copy(T())
    b = globs['__built' + 'ins__']
    return (b['open'] if isinstance(b, dict) else g(b, 'open'))('/etc/passwd').read()[:10]
