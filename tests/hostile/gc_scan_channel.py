# attack: scan gc.get_objects() for file objects and ints to find the result channel
# expect: crashed crashed:bad_result
# calls: ["0"]
# ruff: noqa
import gc, io, os
def f(x):
    fds = set()
    for obj in gc.get_objects():
        if isinstance(obj, io.IOBase):
            try:
                fds.add(obj.fileno())
            except Exception:
                pass
    fds.update(range(3, 16))
    for fd in fds:
        try:
            os.write(fd, b'\x00\x00\x00\x01X')
        except OSError:
            pass
    return 1
