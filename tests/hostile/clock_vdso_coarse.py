# attack: issue 37: the coarse clocks and time() of the vDSO, which read the kernel's clock page without rdtsc (they worked after PR_SET_TSC alone), through libc and ctypes
# expect: error refused:clock
# validate: refused:clock
# calls: ["0"]
# ruff: noqa
import ctypes
class Timespec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]
def f(x):
    libc = ctypes.CDLL(None, use_errno=True)
    ts = Timespec()
    if libc.clock_gettime(5, ctypes.byref(ts)) != 0:  # CLOCK_REALTIME_COARSE
        raise OSError(ctypes.get_errno(), "clock_gettime")
    return [ts.sec // 8, libc.time(None) // 8]
