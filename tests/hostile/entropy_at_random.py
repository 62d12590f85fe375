# attack: issue 37: the 16 random bytes the kernel gives every exec (AT_RANDOM in the auxiliary vector): in the fork servers they are overwritten with bytes drawn from the hash seed
# expect: ok
# validate: nondeterministic
# calls: ["0"]
# ruff: noqa
import ctypes
def f(x):
    libc = ctypes.CDLL(None)
    libc.getauxval.restype = ctypes.c_void_p
    return ctypes.string_at(libc.getauxval(25), 16).hex()  # AT_RANDOM
