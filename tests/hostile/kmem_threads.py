# attack: issue 22: many threads, each a kernel stack (16 KiB) and task struct outside RLIMIT_AS
# expect: ok
# calls: ["0"]
# values: ["0"]
# ruff: noqa
import _thread
def f(hold):
    stop = _thread.allocate_lock()
    stop.acquire()
    started = 0
    for _ in range(10000):
        try:
            _thread.start_new_thread(stop.acquire, ())
        except (RuntimeError, OSError):
            break
        started += 1
    sum(range(int(hold * 20_000_000)))  # holds about `hold` seconds of CPU (a child has no clock)
    stop.release()
    return started
