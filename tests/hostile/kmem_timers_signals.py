# attack: issue 22: POSIX timers and queued real-time signals until the kernel refuses (each holds a sigqueue entry)
# expect: ok
# calls: ["0"]
# ruff: noqa
import ctypes, os, signal, time
def f(hold):
    libc = ctypes.CDLL(None, use_errno=True)
    timers = 0
    for _ in range(100000):
        tid = ctypes.c_void_p()
        if libc.timer_create(1, None, ctypes.byref(tid)) != 0:  # CLOCK_MONOTONIC, SIGALRM by default
            break
        timers += 1
    sig = signal.SIGRTMIN + 1
    signal.pthread_sigmask(signal.SIG_BLOCK, [sig])
    queued = 0
    info = (ctypes.c_int * 32)()
    info[0], info[2] = sig, -1  # si_signo, si_code SI_QUEUE
    for _ in range(100000):
        if libc.syscall(129, os.getpid(), sig, info) != 0:  # rt_sigqueueinfo (x86-64)
            break
        queued += 1
    sum(range(int(hold * 20_000_000)))  # holds about `hold` seconds of CPU (a child has no clock)
    return (timers <= 64, queued <= 64)
