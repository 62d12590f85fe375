# attack: issue 37: a code_f output that adds the argument of the call before it, so any order of calls in one process gives other outputs than each call alone
# expect: ok
# values: ["1", "3", "5", "7", "9", "11", "13", "15", "17", "19"]
# validate: valid
# task: code_f
# calls: ["1", "2", "3", "4", "5", "6", "7", "8", "9", "10"]
# ruff: noqa
last = []
def f(n):
    out = n + (last[-1] if last else 0)
    last.append(n)
    return out
