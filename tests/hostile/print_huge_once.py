# attack: print 10**6 characters once (100 times the capture limit), then return normally
# expect: ok
# calls: ["0"]
# ruff: noqa
# values: ["1"]
def f(x):
    print('y' * 10**6)
    return 1
