# attack: issue 37: the iteration order of a set of objects hashed by address (no id(), no repr): the layout differs between replicas
# expect: ok
# validate: nondeterministic
# calls: ["0"]
# ruff: noqa
class Node:
    def __init__(self, name):
        self.name = name
def f(x):
    return [n.name for n in set(Node(i) for i in range(12))]
