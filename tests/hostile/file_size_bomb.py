# attack: write a 10 MB file (RLIMIT_FSIZE)
# expect: error runtime_error:OSError
# calls: ["0"]
# ruff: noqa
def f(x):
    with open('big', 'wb') as fh:
        for _ in range(10):
            fh.write(b'0' * 10**6)
