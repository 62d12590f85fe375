# attack: replace the child by /bin/sh with os.execv (full mode: no shell in the view; elsewhere it inherits every limit)
# expect: error runtime_error:FileNotFoundError|crashed crashed:exit_2
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    os.execv('/bin/sh', ['sh', '-c', 'echo pwned > /tmp/populora_pwned_exec_shell'])
