# attack: a key in the user keyring (outlived the program, the sandbox and the caller)
# expect: ok
# calls: ["0"]
# ruff: noqa
# values: ["[(-1, 1), (-1, 1)]"]
import ctypes
def f(x):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    found = []
    # add_key("user", "populora_pwned", "x", 1, KEY_SPEC_USER_KEYRING) then keyctl(KEYCTL_GET_KEYRING_ID, session)
    for args in ((248, b"user", b"populora_pwned", b"x", 1, -4), (250, 0, -3, 0)):
        ret = libc.syscall(*[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
        found.append((ret, ctypes.get_errno()))
    return found
