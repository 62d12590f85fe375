# attack: issue 37: adjtimex(0) reads the time along with the clock's discipline (struct timex's time field)
# expect: error refused:clock
# validate: refused:clock
# calls: ["0"]
# ruff: noqa
import ctypes
def f(x):
    libc = ctypes.CDLL(None, use_errno=True)
    timex = ctypes.create_string_buffer(256)  # modes = 0: only read
    if libc.adjtimex(timex) == -1:
        raise OSError(ctypes.get_errno(), 'adjtimex')
    return int.from_bytes(timex.raw[72:80], 'little') // 8  # time.tv_sec
