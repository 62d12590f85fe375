# attack: issue 37: a time bomb on the monotonic clocks (time.monotonic, perf_counter): in a child they are frozen (CPython 3.11 reads the monotonic clock on every lock acquisition, so it cannot fault), so the answer never changes
# expect: ok
# values: ["0"]
# steady: the same answer seconds apart
# calls: ["0"]
# ruff: noqa
import time
def f(x):
    start = time.monotonic()
    sum(range(3_000_000))  # some time passes
    elapsed = time.perf_counter() - start + time.monotonic() - start
    return int(elapsed * 1000) + int(time.monotonic()) // 3600 - int(start) // 3600
