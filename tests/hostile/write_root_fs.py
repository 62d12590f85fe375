# attack: chdir to / and write a file there
# expect: error runtime_error:OSError|runtime_error:PermissionError
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    os.chdir('/')
    open('populora_pwned_write_root_fs', 'w').write('pwned')
