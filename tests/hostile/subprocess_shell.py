# attack: spawn a shell that writes outside the work directory
# expect: error runtime_error:BlockingIOError|runtime_error:OSError|runtime_error:PermissionError|runtime_error:ModuleNotFoundError
# calls: ["0"]
# ruff: noqa
import subprocess
def f(x):
    subprocess.run(['sh', '-c', 'echo pwned > /tmp/populora_pwned_subprocess_shell'])
