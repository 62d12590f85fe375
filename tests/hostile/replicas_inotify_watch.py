# attack: issue 22: one replica watches a runtime directory with inotify to see which files the other (or the host) opens
# expect: error runtime_error:PermissionError
# calls: ["0"]
# ruff: noqa
import ctypes, os
def f(x):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(0)
    if fd < 0:
        raise OSError(ctypes.get_errno(), 'inotify_init1')
    return libc.inotify_add_watch(fd, os.path.dirname(os.__file__).encode(), 0xFFF)
