# attack: return an object whose __repr__ raises
# expect: error runtime_error:ZeroDivisionError
# calls: ["0"]
# ruff: noqa
class Bad:
    def __repr__(self):
        return str(1 / 0)
def f(x):
    return Bad()
