# attack: connect to a service on localhost
# expect: error runtime_error:PermissionError|runtime_error:OSError|runtime_error:ConnectionRefusedError
# calls: ["0"]
# ruff: noqa
import socket
def f(x):
    s = socket.create_connection(('127.0.0.1', 22), timeout=2)
    return 'connected'
