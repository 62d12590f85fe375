# attack: a System V message queue under a fixed key, left for the next program to read (a "time bomb")
# expect: ok
# calls: ["0"]
# ruff: noqa
# values: ["(-1, 1)"]
import ctypes
def f(x):
    libc = ctypes.CDLL(None, use_errno=True)
    qid = libc.msgget(0x5EED, 0o1000 | 0o666)  # IPC_CREAT
    return (qid, ctypes.get_errno())
