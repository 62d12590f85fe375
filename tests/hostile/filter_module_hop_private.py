# attack: issue 13 item 7 (AST filter: banned:collections): a hop through an allowed module's private attributes reaches os
# expect: error runtime_error:FileNotFoundError
# calls: ["0"]
# ruff: noqa
import typing
def f(x):
    os = typing.collections._sys.modules['os']
    return os.open('/etc/passwd', os.O_RDONLY)
