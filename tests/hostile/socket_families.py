# attack: sockets of every address family (AF_VSOCK reached the host's port space; AF_UNIX buffers held kernel memory, issue 22)
# expect: ok
# calls: ["0"]
# ruff: noqa
# values: ["[('AF_INET', 1), ('AF_INET6', 1), ('AF_NETLINK', 1), ('AF_PACKET', 1), ('AF_VSOCK', 1), ('AF_UNIX', 1)]"]
import socket
def f(x):
    out = []
    for name in ('AF_INET', 'AF_INET6', 'AF_NETLINK', 'AF_PACKET', 'AF_VSOCK', 'AF_UNIX'):
        try:
            socket.socket(getattr(socket, name), socket.SOCK_DGRAM if name == 'AF_NETLINK' else socket.SOCK_STREAM if name != 'AF_PACKET' else socket.SOCK_RAW).close()
            out.append((name, 'ok'))
        except OSError as exc:
            out.append((name, exc.errno))
    return out
