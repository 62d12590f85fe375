# attack: issue 32: ABCMeta called with a namespace built at run time whose __slots__ names a dunder (a member descriptor under a name C code looks up), then the frames of a running generator up to the fork server
# expect: ok
# filter: banned:ABCMeta
# calls: ["0"]
# ruff: noqa
import abc
def f(x):
    K = abc.ABCMeta('K', (), {'__slo' + 'ts__': ('__form' + 'at__',)})
    k = K()
    def g():
        yield gen.gi_frame.f_back.f_back.f_globals
    gen = g()
    return sorted(next(gen))[:3] is not None
