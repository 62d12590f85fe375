# attack: issue 37: count loop turns until SIGXCPU (a CPU-time limit of its own choosing): how fast the host runs this program
# expect: error refused:clock
# validate: refused:clock
# calls: ["0"]
# ruff: noqa
import resource, signal
def f(x):
    hits = []
    signal.signal(signal.SIGXCPU, lambda *a: hits.append(1))
    resource.setrlimit(resource.RLIMIT_CPU, (1, resource.getrlimit(resource.RLIMIT_CPU)[1]))
    n = 0
    while not hits:
        n += 1
    return n // 10**6
