# attack: issue 37: CPU time as a clock: getrusage() and times() (how fast this run goes, and times()'s ticks since boot)
# expect: error refused:clock
# validate: refused:clock
# calls: ["0"]
# ruff: noqa
import os, resource
def f(x):
    sum(range(200000))
    return [resource.getrusage(resource.RUSAGE_SELF).ru_utime > 0.01, os.times().elapsed > 0]
