# attack: issue 37: which CPU the scheduler picked (sched_getcpu through libc, the vDSO's getcpu, the getcpu system call): a coin the host flips
# expect: error refused:entropy
# validate: refused:entropy
# calls: ["0"]
# ruff: noqa
import ctypes
def f(x):
    libc = ctypes.CDLL(None, use_errno=True)
    cpu = libc.sched_getcpu()
    if cpu < 0:
        raise OSError(ctypes.get_errno(), 'sched_getcpu')
    return cpu % 2
