# attack: a module-level object whose __del__ never returns
# expect: ok
# calls: ["0"]
# ruff: noqa
# values: ["4"]
class Sticky:
    def __del__(self):
        while True:
            pass
keep = Sticky()
def f(x):
    return 4
