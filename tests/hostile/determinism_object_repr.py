# attack: issue 37: an object's default repr carries its address ('<object object at 0x...>'): without address randomisation the layout is perturbed from the hash seed, so replicas differ
# expect: ok
# validate: nondeterministic
# calls: ["0"]
# ruff: noqa
class Box:
    pass
def f(x):
    return repr(Box())[-6:]
