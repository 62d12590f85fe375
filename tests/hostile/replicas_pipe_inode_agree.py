# attack: issue 32: two executions agree on a fresh random value through the host's inode counter: pinned to CPU 0, the first (the counter at a mark) moves the counter by creating pipes to encode its value; the next one, pinned there too, reads it from the inode number of a new pipe
# expect: error runtime_error:PermissionError
# validate: runtime_error:PermissionError
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    os.sched_setaffinity(0, {0})
    def counter():
        r, w = os.pipe()
        ino = os.fstat(r).st_ino
        os.close(r)
        os.close(w)
        return ino
    c = counter()
    if c % 64 >= 48:  # a mark left by an earlier execution: read its value
        return (c % 64 - 48) // 1
    v = int.from_bytes(os.urandom(1), 'big') % 16
    while counter() % 64 != 47 + v:
        pass
    return v
