# attack: ignore SIGTERM/SIGXCPU/SIGALRM/SIGINT, then loop (ignoring SIGXCPU is refused: the CPU-time limit's own death)
# expect: error refused:clock
# calls: ["0"]
# ruff: noqa
import signal
for s in (signal.SIGTERM, signal.SIGXCPU, signal.SIGALRM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
def f(x):
    while True:
        pass
