# attack: issue 22: pin kernel memory in pipe buffers: as many pipes as RLIMIT_NOFILE allows, each filled to its default 64 KiB
# expect: ok
# calls: ["0"]
# ruff: noqa
import os, time
def f(hold):
    pipes, held = [], 0
    chunk = b'x' * 65536
    while True:
        try:
            r, w = os.pipe()
        except OSError:
            break
        pipes.append((r, w))
        os.set_blocking(w, False)
        while True:
            try:
                held += os.write(w, chunk)
            except OSError:
                break
    sum(range(int(hold * 20_000_000)))  # holds about `hold` seconds of CPU (a child has no clock)
    return held > 0
