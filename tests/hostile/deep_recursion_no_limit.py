# attack: raise the recursion limit to 10**6, then recurse (C stack overflow)
# expect: error runtime_error:RecursionError|crashed crashed:SIGSEGV|memory memory|timeout timeout
# calls: ["0"]
# ruff: noqa
import sys
sys.setrecursionlimit(10**6)
def f(x):
    return f(x + 1) + 1
