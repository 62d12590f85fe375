# attack: issue 22 (AST filter: banned:global_enum): enum.global_enum writes an enum's members into the program's module globals under names built at run time (here it shadows the builtin print)
# expect: ok
# calls: ["0"]
# ruff: noqa
import enum
def f(x):
    E = enum.Enum('E', [('pr' + 'int', 1)])
    enum.global_enum(E)
    return str(print)
