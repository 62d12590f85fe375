# attack: list /root (the caller's home)
# expect: ok|error runtime_error:PermissionError
# calls: ["0"]
# ruff: noqa
# values: ["[]"]
import os
def f(x):
    return sorted(n for n in os.listdir('/root') if not n.startswith('.py'))
