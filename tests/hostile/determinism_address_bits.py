# attack: issue 32: an output derived from an object's address: a long-lived fork server gave every child the same heap, so the rerun on the same server always confirmed the coin flip of its layout
# expect: ok
# validate: nondeterministic
# calls: ["0"]
# ruff: noqa
def f(x):
    return id(object()) % 65521
