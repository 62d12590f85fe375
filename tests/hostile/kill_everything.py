# attack: kill(-1, SIGKILL): every process the child may signal
# expect: error runtime_error:ProcessLookupError
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    os.kill(-1, 9)
