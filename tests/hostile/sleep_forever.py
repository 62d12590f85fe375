# attack: sleep far beyond the wall-clock limit (no CPU used)
# expect: timeout timeout
# calls: ["0"]
# ruff: noqa
import time
def f(x):
    time.sleep(1000)
