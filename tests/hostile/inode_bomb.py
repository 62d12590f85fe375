# attack: create files until the file system refuses
# expect: error runtime_error:OSError
# calls: ["0"]
# ruff: noqa
def f(x):
    for i in range(10**6):
        open(f'f{i}', 'w').close()
