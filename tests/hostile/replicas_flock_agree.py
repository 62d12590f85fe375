# attack: issue 22: the two determinism replicas agree on a fresh random value through flock on shared host inodes of the runtime (the first to lock a file leads and locks the files of its 1-bits; the other reads them with non-blocking locks)
# expect: error runtime_error:PermissionError
# calls: ["0"]
# ruff: noqa
import fcntl, os, time
def f(x):
    d = os.path.dirname(os.__file__)
    names = sorted(n for n in os.listdir(d) if n.endswith('.py'))[:17]
    fds = [os.open(os.path.join(d, n), os.O_RDONLY) for n in names]
    try:
        fcntl.flock(fds[0], fcntl.LOCK_EX | fcntl.LOCK_NB)
        leader = True
    except BlockingIOError:
        leader = False
    if leader:
        v = int.from_bytes(os.urandom(2), 'big')
        for i in range(16):
            if v >> i & 1:
                fcntl.flock(fds[i + 1], fcntl.LOCK_EX)
        time.sleep(1.0)
        return v
    time.sleep(0.3)
    v = 0
    for i in range(16):
        try:
            fcntl.flock(fds[i + 1], fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fds[i + 1], fcntl.LOCK_UN)
        except BlockingIOError:
            v |= 1 << i
    return v
