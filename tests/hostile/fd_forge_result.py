# attack: write a forged 'ok' frame (guessed token) to every fd, then exit 0
# expect: crashed crashed:bad_result
# calls: ["0"]
# ruff: noqa
import os, struct
def pack(fields):
    body = b''.join(struct.pack('>I', len(s.encode())) + s.encode() for s in fields)
    return struct.pack('>I', len(body)) + body
def f(x):
    frame = pack(['0' * 32, 'ok', '', '', "'forged'"])
    for fd in range(64):
        try:
            os.write(fd, frame)
        except OSError:
            pass
    os._exit(0)
