# attack: replace the child by /bin/sh with os.execv (allowed: the shell inherits every limit)
# expect: crashed crashed:exit_2
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    os.execv('/bin/sh', ['sh', '-c', 'echo pwned > /tmp/populora_pwned_exec_shell'])
