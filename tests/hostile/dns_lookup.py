# attack: resolve a host name
# expect: error runtime_error:gaierror|runtime_error:OSError|runtime_error:LookupError
# calls: ["0"]
# ruff: noqa
import socket
def f(x):
    return socket.gethostbyname('pypi.org')
