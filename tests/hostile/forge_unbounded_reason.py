# attack: forge the result frame (token read from the child's own frames) with a 6,000-character reason holding a newline and ESC
# expect: crashed crashed:bad_result
# calls: ["0"]
# ruff: noqa
import os, struct, sys
def f(x):
    frame, token = sys._getframe(), None
    while frame is not None and token is None:
        fin = frame.f_locals.get('finish')
        if fin is not None and fin.__closure__:
            for cell in fin.__closure__:
                c = cell.cell_contents
                if isinstance(c, str) and len(c) == 32:
                    token = c
        frame = frame.f_back
    fields = [token or '', 'error', 'runtime_error:' + 'A' * 6000 + '\n\x1b[2J', 'x']
    body = b''.join(struct.pack('>I', len(b)) + b for b in (s.encode() for s in fields))
    os.write(3, struct.pack('>I', len(body)) + body)
    os._exit(0)
