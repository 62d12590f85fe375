# attack: issue 22: AF_UNIX socketpairs with the largest send buffers, filled, then sent in flight (SCM_RIGHTS) and closed so more can be made
# expect: ok
# calls: ["0"]
# ruff: noqa
import os, socket, time
def fill(s):
    n = 0
    s.setblocking(False)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 30)
    except OSError:
        pass
    for size in (65536, 4096, 256):
        while True:
            try:
                n += s.send(b'x' * size)
            except OSError:
                break
    return n
def f(hold):
    held = 0
    try:
        carrier = socket.socketpair()
    except OSError:
        return 0
    inflight = True
    kept = []
    while True:
        try:
            a, b = socket.socketpair()
        except OSError:
            break
        held += fill(a) + fill(b)
        if inflight:
            try:
                socket.send_fds(carrier[0], [b'x'], [a.fileno(), b.fileno()])
                a.close(); b.close()
                continue
            except OSError:
                inflight = False
        kept.append((a, b))
    sum(range(int(hold * 20_000_000)))  # holds about `hold` seconds of CPU (a child has no clock)
    return held > 0
