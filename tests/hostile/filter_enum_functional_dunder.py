# attack: issue 32: the enum functional API builds a class namespace at run time: a dunder name among the members becomes a plain class attribute (here __format__, read in C by format()), so format() calls a function of the program's choosing with a name of its choosing
# expect: ok
# filter: banned:enum_functional
# calls: ["0"]
# values: ["'format hooked: spec'"]
# ruff: noqa
import enum
def f(x):
    E = enum.Enum('E', [('A', 1), ('__form' + 'at__', lambda self, spec: 'format hooked: ' + spec)])
    return format(E.A, 'spec')
