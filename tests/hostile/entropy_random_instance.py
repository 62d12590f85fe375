# attack: issue 37: a new random.Random() seeds itself from entropy, then (refused) from the time and the pid
# expect: error refused:clock|refused:entropy
# validate: refused:clock|refused:entropy
# calls: ["0"]
# ruff: noqa
import random
def f(x):
    return random.Random().random() < 0.5
