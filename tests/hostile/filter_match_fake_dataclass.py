# attack: issue 22 (AST filter: banned:match_positional): a program-defined decorator named dataclass returns a class whose metaclass says every object is an instance and whose __match_args__ names __globals__; the positional pattern reads it from a function
# expect: error runtime_error:FileNotFoundError
# calls: ["0"]
# ruff: noqa
M = type('M', (type,), {'__instance' + 'check__': lambda c, o: True})
def dataclass(c):
    return M('P', (), {'__match_' + 'args__': ('__glo' + 'bals__',)})
@dataclass
class P:
    x: int
def f(x):
    match f:
        case P(g):
            return g['__built' + 'ins__'].open('/etc/passwd').read()[:10]
