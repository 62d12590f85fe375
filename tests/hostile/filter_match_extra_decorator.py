# attack: issue 22 (AST filter: banned:dataclass): the real dataclass, then an extra decorator that swaps the class for one with a hostile metaclass and __match_args__
# expect: error runtime_error:FileNotFoundError
# calls: ["0"]
# ruff: noqa
from dataclasses import dataclass
M = type('M', (type,), {'__instance' + 'check__': lambda c, o: True})
def swap(c):
    return M('P', (), {'__match_' + 'args__': ('__glo' + 'bals__',)})
@swap
@dataclass
class P:
    x: int
def f(x):
    match f:
        case P(g):
            return g['__built' + 'ins__'].open('/etc/passwd').read()[:10]
