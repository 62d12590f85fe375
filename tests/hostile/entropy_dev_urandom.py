# attack: issue 37: read /dev/urandom and /dev/random (no random device exists in a child's root)
# expect: error runtime_error:FileNotFoundError
# validate: runtime_error:FileNotFoundError
# calls: ["0"]
# ruff: noqa
def f(x):
    for path in ('/dev/urandom', '/dev/random'):
        try:
            return open(path, 'rb').read(1)[0] % 2
        except FileNotFoundError:
            continue
    raise FileNotFoundError('no random device')
