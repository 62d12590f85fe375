# attack: write garbage to every file descriptor (the result channel included)
# expect: crashed crashed:bad_result
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    for fd in range(64):
        try:
            os.write(fd, b'\x00\x00\x00\x05hello')
        except OSError:
            pass
    return 1
