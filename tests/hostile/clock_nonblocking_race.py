# attack: issue 37: time the fork server by racing it: fill the output pipe without blocking and count spins until the server drains it (O_NONBLOCK and FIONREAD are refused)
# expect: error refused:clock
# validate: refused:clock
# calls: ["0"]
# ruff: noqa
import fcntl, os
def f(x):
    flags = fcntl.fcntl(1, fcntl.F_GETFL)
    fcntl.fcntl(1, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    spins = 0
    while True:
        try:
            os.write(1, b'x' * 4096)
        except BlockingIOError:
            spins += 1
            if spins > 10000:
                return spins
