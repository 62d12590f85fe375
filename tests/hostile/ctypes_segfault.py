# attack: dereference NULL through ctypes
# expect: crashed crashed:SIGSEGV
# calls: ["0"]
# ruff: noqa
import ctypes
def f(x):
    return ctypes.c_int.from_address(16).value
