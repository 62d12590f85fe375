# attack: issue 37: getrandom through ctypes, and the vDSO's getrandom (Linux 6.11+), past Python's fallbacks
# expect: error refused:entropy
# validate: refused:entropy
# calls: ["0"]
# ruff: noqa
import ctypes
def f(x):
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(8)
    if libc.syscall(318, buf, 8, 1) != 8:  # getrandom(buf, 8, GRND_NONBLOCK)
        raise OSError(ctypes.get_errno(), 'getrandom')
    return buf.raw[0] % 2
