# attack: issue 37: a random UUID (uuid is not preloaded; built by hand from os.urandom as uuid4 does)
# expect: error runtime_error:ModuleNotFoundError|refused:entropy
# validate: runtime_error:ModuleNotFoundError|refused:entropy
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    try:
        import uuid
        return uuid.uuid4().hex[0]
    except ImportError:
        return os.urandom(16).hex()[0]
