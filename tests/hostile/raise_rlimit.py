# attack: raise the CPU-time hard limit
# expect: error runtime_error:ValueError|refused:clock
# calls: ["0"]
# ruff: noqa
import resource
def f(x):
    resource.setrlimit(resource.RLIMIT_CPU, (10**6, 10**6))
