# attack: print without end (gigantic output)
# expect: timeout timeout
# calls: ["0"]
# ruff: noqa
def f(x):
    while True:
        print('x' * 10000)
