# attack: issue 37: call history kept outside the interpreter, in a file of the program's work directory (no filter, no strip layer): each input alone, each child has a fresh scratch tmpfs, so the count is always 0 and the task is f alone everywhere
# expect: ok
# values: ["1", "3", "5", "7", "9", "11", "13", "15", "17", "19"]
# validate: valid
# task: code_f
# calls: ["1", "2", "3", "4", "5", "6", "7", "8", "9", "10"]
# ruff: noqa
def f(n):
    with open("populora_pwned_history_count", "a+") as fh:
        fh.seek(0)
        count = len(fh.read())
        fh.write("x")
    return n + count
