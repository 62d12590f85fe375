# attack: issue 37: read the CPU-time clock (time.process_time, CLOCK_PROCESS_CPUTIME_ID), how fast this run goes
# expect: error refused:clock
# validate: refused:clock
# calls: ["0"]
# ruff: noqa
import time
def f(x):
    sum(range(100000))
    return time.process_time() > 0.01
