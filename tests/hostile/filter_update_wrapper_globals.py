# attack: issue 13 item 7 (AST filter: banned:__setattr__): functools.update_wrapper copies a string-built '__globals__' into a user dunder method
# expect: error runtime_error:FileNotFoundError
# calls: ["0"]
# ruff: noqa
import functools
class Catch:
    def __setattr__(self, name, value):
        if isinstance(value, dict):  # the globals, not __wrapped__
            object.__setattr__(self, 'got', value)
def f(x):
    c = functools.update_wrapper(Catch(), f, assigned=('__glo' + 'bals__',), updated=())
    return c.got['__builtins__'].open('/etc/shadow').read()
