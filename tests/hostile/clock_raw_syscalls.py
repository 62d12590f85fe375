# attack: issue 37: the clock system calls themselves, past libc and the vDSO (clock_gettime, gettimeofday, time, clock_getres through syscall())
# expect: error refused:clock
# validate: refused:clock
# calls: ["0"]
# ruff: noqa
import ctypes
def f(x):
    libc = ctypes.CDLL(None, use_errno=True)
    buf = (ctypes.c_long * 4)()
    for number, args in ((228, (0, buf)), (96, (buf, None)), (201, (None,)), (229, (0, buf))):
        if libc.syscall(number, *args) == -1:
            raise OSError(ctypes.get_errno(), f"syscall {number}")
    return buf[0] // 8
