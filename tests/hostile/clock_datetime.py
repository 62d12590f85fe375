# attack: issue 37: the date through datetime (not preloaded: a child cannot import it) or through time.localtime()
# expect: error runtime_error:ModuleNotFoundError|refused:clock
# validate: runtime_error:ModuleNotFoundError|refused:clock
# calls: ["0"]
# ruff: noqa
import time
def f(x):
    try:
        import datetime
        return datetime.datetime.now().minute
    except ImportError:
        return time.localtime().tm_min
