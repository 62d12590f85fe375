# attack: issue 37: a code_f program whose output changes from the fifth call on, whatever the order of the calls: issue 32's validation saw it only in its later executions' drawn orders, and the checker, which ran the five hidden inputs in one child, would have reached it; each input alone everywhere, every call is the first
# expect: ok
# values: ["1", "2", "3", "4", "-5", "-6", "-7", "-8", "-9", "-10"]
# validate: valid
# task: code_f
# calls: ["1", "2", "3", "4", "5", "6", "7", "8", "9", "10"]
# ruff: noqa
calls = []
def f(n):
    calls.append(n)
    return n if len(calls) < 5 else -n
