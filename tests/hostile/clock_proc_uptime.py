# attack: issue 37: the time since boot from /proc/uptime and /proc/self/stat (a child's /proc is empty)
# expect: error runtime_error:FileNotFoundError
# validate: runtime_error:FileNotFoundError
# calls: ["0"]
# ruff: noqa
def f(x):
    return open('/proc/uptime').read().split()[0]
