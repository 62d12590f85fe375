# attack: issue 37: the random module's global generator (seeded at import, and again after every fork, from the kernel): in a child it is seeded from the hash seed instead, so its numbers differ between replicas and repeat for one seed
# expect: ok
# validate: nondeterministic
# calls: ["0"]
# ruff: noqa
import random
def f(x):
    return [random.random(), random.getrandbits(16)]
