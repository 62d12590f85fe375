# attack: issue 22: memfds filled up to RLIMIT_FSIZE, one per free descriptor: memory outside RLIMIT_AS and outside the scratch tmpfs
# expect: ok
# calls: ["0"]
# ruff: noqa
import os, time
def f(hold):
    fds, held = [], 0
    chunk = b'x' * 65536
    while True:
        try:
            fd = os.memfd_create('m')
        except OSError:
            break
        fds.append(fd)
        while True:
            try:
                held += os.write(fd, chunk)
            except OSError:
                break
    sum(range(int(hold * 20_000_000)))  # holds about `hold` seconds of CPU (a child has no clock)
    return held
