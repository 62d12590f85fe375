# attack: open a TCP connection to the internet
# expect: error runtime_error:PermissionError|runtime_error:OSError|runtime_error:ConnectionRefusedError
# calls: ["0"]
# ruff: noqa
import socket
def f(x):
    s = socket.create_connection(('1.1.1.1', 80), timeout=2)
    return 'connected'
