# attack: issue 22: stat() of absent long names in a host directory of the runtime: each leaves a negative dentry in the host's dentry cache
# expect: ok
# calls: ["0.2"]
# ruff: noqa
import os, time
def f(seconds):
    base = os.path.dirname(os.__file__)
    stem = 'populora-absent-' + os.urandom(8).hex() + 'n' * 180  # fresh names: none cached yet
    n = 0
    end = time.process_time() + seconds
    while time.process_time() < end:
        for _ in range(1000):
            try:
                os.stat(f'{base}/{stem}{n}')
            except OSError:
                pass
            n += 1
    return n > 0
