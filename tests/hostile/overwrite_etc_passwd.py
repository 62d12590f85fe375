# attack: append to /etc/passwd
# expect: error runtime_error:OSError|runtime_error:PermissionError
# calls: ["0"]
# ruff: noqa
def f(x):
    open('/etc/passwd', 'a').write('pwned::0:0::/:/bin/sh\n')
