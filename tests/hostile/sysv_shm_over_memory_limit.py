# attack: System V shared memory, which is not counted in the address-space limit and outlived the program
# expect: ok
# calls: ["0"]
# ruff: noqa
# values: ["(-1, 1)"]
import ctypes
def f(x):
    libc = ctypes.CDLL(None, use_errno=True)
    shmid = libc.shmget(0, 256 << 20, 0o1000 | 0o600)  # IPC_PRIVATE, IPC_CREAT
    return (shmid, ctypes.get_errno())
