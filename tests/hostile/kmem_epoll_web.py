# attack: issue 22: epoll instances up to RLIMIT_NOFILE, each watching every other descriptor (epoll items are kernel memory)
# expect: ok
# calls: ["0"]
# ruff: noqa
import select, time
def f(hold):
    eps = []
    while True:
        try:
            eps.append(select.epoll())
        except OSError:
            break
    watches = 0
    for ep in eps:
        for other in eps:
            if other is not ep:
                try:
                    ep.register(other.fileno(), select.EPOLLIN)
                    watches += 1
                except OSError:
                    pass
    sum(range(int(hold * 20_000_000)))  # holds about `hold` seconds of CPU (a child has no clock)
    return watches > 0
