# attack: issue 37 (the red team's forgery): a code_f program that changes its output only when the calls so far are the hidden inputs in input order, the order issue 32's checker fed them in one child; no order drawn by validation starts that way, so the task was valid and its own program judged wrong; each input alone everywhere, it is f alone in validation and in the checker
# expect: ok
# values: ["1", "2", "3", "4", "5", "6", "7", "8", "9", "10"]
# validate: valid
# task: code_f
# calls: ["1", "2", "3", "4", "5", "6", "7", "8", "9", "10"]
# ruff: noqa
HIDDEN = [6, 7, 8, 9, 10]
calls = []
def f(n):
    calls.append(n)
    return n * 10 if len(calls) >= 2 and calls == HIDDEN[:len(calls)] else n
