# attack: issue 13 item 7 (AST filter: banned:gi_frame): a str.format field path walks a running generator's frame to the caller's globals
# expect: ok
# calls: ["0"]
# ruff: noqa
# values: ["'__main__'"]
def f(x):
    def g():
        yield '{0.gi_frame.f_back.f_globals[__name__]}'.format(gen)
    gen = g()
    return next(gen)
