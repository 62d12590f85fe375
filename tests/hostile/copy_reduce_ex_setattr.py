# attack: issue 22: copy.copy through a __reduce_ex__ defined by a run-time key writes attributes named at run time (setattr in copy._reconstruct) on the copy; the AST filter lets it through (docs/sandbox.md: a class namespace built at run time), the copy is the program's own object
# expect: ok
# calls: ["0"]
# values: ["['Box', 'here']"]
# ruff: noqa
import copy
class Box:
    pass
def f(x):
    T = type('T', (), {'__reduce_' + 'ex__': lambda self, p: (Box, (), (None, {'wr' + 'itten': 'here'}))})
    y = copy.copy(T())
    return [type(y).__name__, y.written]
