# attack: start threads without end
# expect: error runtime_error:RuntimeError
# calls: ["0"]
# ruff: noqa
import threading, time
def f(x):
    while True:
        threading.Thread(target=time.sleep, args=(100,)).start()
