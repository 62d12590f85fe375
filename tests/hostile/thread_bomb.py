# attack: start threads without end (threading is not preloaded: the thread module itself)
# expect: error runtime_error:RuntimeError|runtime_error:PermissionError
# calls: ["0"]
# ruff: noqa
import _thread, signal
def f(x):
    while True:
        _thread.start_new_thread(signal.pause, ())
