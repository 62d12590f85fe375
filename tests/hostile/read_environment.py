# attack: read the environment for secrets
# expect: ok
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    return sorted(os.environ.items())
