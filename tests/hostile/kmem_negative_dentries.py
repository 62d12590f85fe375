# attack: issue 22: look up absent long names in a host directory of the runtime (access(); stat() is refused since issue 37): each leaves a negative dentry in the host's dentry cache
# expect: ok
# calls: ["0.2"]
# ruff: noqa
import os
def f(seconds):
    base = os.path.dirname(os.__file__)
    # fresh names (none cached yet) without entropy: the uid is drawn from the job and the hash
    # seed, which the kmem measurement draws anew each round
    stem = f'populora-absent-{os.getuid()}-' + 'n' * 180
    n = 0
    for _ in range(int(seconds * 300_000)):  # about `seconds` of CPU here (a child has no clock)
        os.access(f'{base}/{stem}{n}', os.F_OK)
        n += 1
    return n > 0
