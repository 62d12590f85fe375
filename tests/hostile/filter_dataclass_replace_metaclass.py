# attack: issue 22 (AST filter: banned:replace): dataclasses.replace reads getattr(obj, name) for the names of fields a metaclass supplies, and hands the values to the class it calls
# expect: ok
# values: ["['function']"]
# calls: ["0"]
# ruff: noqa
import dataclasses
def f(x):
    fld = dataclasses.field()
    fld.name = '__in' + 'it__'
    M = type('M', (type,), {'__dataclass_fi' + 'elds__': {'k': fld}, '__n' + 'ew__': lambda mcs, *a, **kw: kw if kw else type.__new__(mcs, *a)})
    C = M('C', (), {'__in' + 'it__': f})
    got = dataclasses.replace(C)
    return sorted(type(v).__name__ for v in got.values())
