# attack: issue 13 item 7 (AST filter: banned:ForwardRef): typing.ForwardRef._evaluate runs a string-built expression
# expect: error runtime_error:FileNotFoundError
# calls: ["0"]
# ruff: noqa
import typing
def f(x):
    code = "__imp" + "ort__('os').open('/etc/passwd', 0)"
    return typing.ForwardRef(code)._evaluate({}, {}, frozenset())
