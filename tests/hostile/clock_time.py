# attack: issue 37: read the wall clock with time.time() (the vDSO's clock_gettime(CLOCK_REALTIME)): a time bomb's first step
# expect: error refused:clock
# validate: refused:clock
# calls: ["0"]
# ruff: noqa
import time
def f(x):
    return int(time.time()) // 8
