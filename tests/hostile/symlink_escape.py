# attack: symlink the work directory to /tmp and write through it
# expect: error runtime_error:OSError|runtime_error:PermissionError|runtime_error:FileNotFoundError
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    os.symlink('/tmp', 'escape')
    open('escape/populora_pwned_symlink_escape', 'w').write('pwned')
