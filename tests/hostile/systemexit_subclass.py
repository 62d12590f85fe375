# attack: raise a subclass of SystemExit
# expect: crashed crashed:SystemExit
# calls: ["0"]
# ruff: noqa
class Leave(SystemExit):
    pass
def f(x):
    raise Leave(0)
