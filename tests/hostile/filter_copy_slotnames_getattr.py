# attack: issue 32: __slotnames__ and __setattr__ set in a class namespace built at run time: copy.copy reads every attribute named there (a getattr in C, object.__getstate__) and hands each value to the program; then the program walks a function's globals to the builtins' open
# expect: error runtime_error:FileNotFoundError
# filter: banned:type
# calls: ["0"]
# ruff: noqa
import copy
def f(x):
    got = []
    T = type('T', (), {'__slot' + 'names__': ['__init' + '__', '__cla' + 'ss__'],
                       '__set' + 'attr__': lambda self, key, value: got.append(value)})
    copy.copy(T())
    assert got[1] is T  # the C getattr read the names the program chose at run time
    b = f.__globals__['__builtins__']
    b = b if isinstance(b, dict) else vars(b)
    return b['open']('/etc/passwd').read()[:10]
