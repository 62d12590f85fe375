# attack: open a TCP connection to the internet
# expect: error runtime_error:PermissionError|runtime_error:OSError|runtime_error:ConnectionRefusedError
# calls: ["0"]
# ruff: noqa
import socket
def f(x):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.connect(('1.1.1.1', 80))  # no name lookup: its codec could not be imported in a child
    return 'connected'
