# attack: issue 37: file timestamps through statx called with ctypes (the whole stat family is refused, not only Python's os.stat)
# expect: error runtime_error:PermissionError
# validate: runtime_error:PermissionError
# calls: ["0"]
# ruff: noqa
import ctypes
def f(x):
    open('stamp', 'w').write('now')
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(256)
    if libc.syscall(332, -100, b'stamp', 0, 0xfff, buf) != 0:  # statx(AT_FDCWD, 'stamp', 0, STATX_ALL)
        raise OSError(ctypes.get_errno(), 'statx')
    return int.from_bytes(buf.raw[0x70:0x78], 'little') // 8  # stx_mtime.tv_sec
