# attack: return an object whose __repr__ never returns
# expect: timeout timeout
# calls: ["0"]
# ruff: noqa
class Endless:
    def __repr__(self):
        while True:
            pass
def f(x):
    return Endless()
