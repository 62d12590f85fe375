# attack: mount a tmpfs over /tmp through ctypes
# expect: ok
# calls: ["0"]
# ruff: noqa
# values: ["-1"]
import ctypes
def f(x):
    return ctypes.CDLL(None).mount(b'none', b'/tmp', b'tmpfs', 0, None)
