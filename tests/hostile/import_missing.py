# attack: import a module that does not exist
# expect: error runtime_error:ModuleNotFoundError
# calls: ["0"]
# ruff: noqa
import populora_does_not_exist
def f(x):
    return 1
