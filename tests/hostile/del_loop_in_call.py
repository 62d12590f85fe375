# attack: an object whose __del__ never returns, dropped inside f
# expect: timeout timeout
# calls: ["0"]
# ruff: noqa
class Sticky:
    def __del__(self):
        while True:
            pass
def f(x):
    Sticky()
    return 4
