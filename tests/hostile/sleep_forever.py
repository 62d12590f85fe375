# attack: sleep far beyond the wall-clock limit (issue 37: sleeping is a clock call, refused; pause_forever.py stalls)
# expect: error refused:clock
# calls: ["0"]
# ruff: noqa
import time
def f(x):
    time.sleep(1000)
