# attack: issue 32: formatting through a str subclass whose __format__ is set, in a class namespace built at run time, to the unbound str.format: format() then evaluates a field path written at run time (an attribute walk in C) and shows the function's globals; with them the builtins' open
# expect: error runtime_error:FileNotFoundError
# filter: banned:type
# calls: ["0"]
# ruff: noqa
def f(x):
    S = type('S', (str,), {'__form' + 'at__': vars(str)['form' + 'at']})
    shown = S('{0.__glo' + 'bals__}').__format__(f)  # str.format on a field path built at run time
    assert '__builtins__' in shown  # the C attribute walk read f.__globals__
    b = f.__globals__['__builtins__']
    return (b['open'] if isinstance(b, dict) else b.open)('/etc/passwd').read()[:10]
