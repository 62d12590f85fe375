# attack: issue 32: ordinary code whose output is the iteration order of a set of three strings, an accident of the hash seed: two fixed seeds agreed on it about one time in six, and the rerun on the same seeds always did
# expect: ok
# validate: nondeterministic
# calls: ["['pear', 'plum', 'fig']"]
# ruff: noqa
def f(words):
    return list(set(words))
