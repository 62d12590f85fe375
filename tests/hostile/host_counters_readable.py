# attack: issue 32: read host-wide counters: /proc/stat, meminfo and the dentry counts, sysinfo and the host file systems' free blocks (statfs)
# expect: ok
# values: ["[2, 2, 1, 1]"]
# calls: ["0"]
# ruff: noqa
import ctypes, os
def f(x):
    out = []
    for path in ('/proc/stat', '/proc/sys/fs/dentry-state'):
        try:
            open(path).read()
            out.append(0)
        except OSError as e:
            out.append(e.errno)
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(256)
    out.append(ctypes.get_errno() if libc.sysinfo(buf) else 0)
    out.append(ctypes.get_errno() if libc.statfs(os.path.dirname(os.__file__).encode(), buf) else 0)
    return out
