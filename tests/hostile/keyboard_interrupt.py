# attack: raise KeyboardInterrupt (a BaseException that is not SystemExit)
# expect: error runtime_error:KeyboardInterrupt
# calls: ["0"]
# ruff: noqa
def f(x):
    raise KeyboardInterrupt
