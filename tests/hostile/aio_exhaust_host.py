# attack: issue 22: io_setup takes every slot of the host-wide AIO limit (fs.aio-max-nr), so the host's own async I/O fails
# expect: ok
# calls: ["0"]
# values: ["[1]"]
# ruff: noqa
import ctypes
def f(x):
    libc = ctypes.CDLL(None, use_errno=True)
    errors = set()
    for _ in range(64):
        ctx = ctypes.c_ulong(0)
        if libc.syscall(206, 65536, ctypes.byref(ctx)) != 0:
            errors.add(ctypes.get_errno())
    return sorted(errors)
