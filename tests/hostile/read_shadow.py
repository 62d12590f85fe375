# attack: read /etc/shadow
# expect: error runtime_error:PermissionError|runtime_error:FileNotFoundError
# calls: ["0"]
# ruff: noqa
def f(x):
    return open('/etc/shadow').read()[:20]
