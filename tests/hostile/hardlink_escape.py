# attack: hard-link a system file into the work directory
# expect: error runtime_error:OSError|runtime_error:PermissionError|runtime_error:FileNotFoundError
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    os.link('/etc/passwd', 'passwd')
    return open('passwd').read()[:10]
