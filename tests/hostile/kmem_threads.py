# attack: issue 22: many threads, each a kernel stack (16 KiB) and task struct outside RLIMIT_AS
# expect: ok
# calls: ["0"]
# values: ["0"]
# ruff: noqa
import threading, time
def f(hold):
    stop = threading.Event()
    started = 0
    for _ in range(10000):
        try:
            threading.Thread(target=stop.wait, daemon=True).start()
        except (RuntimeError, OSError):
            break
        started += 1
    time.sleep(hold)
    stop.set()
    return started
