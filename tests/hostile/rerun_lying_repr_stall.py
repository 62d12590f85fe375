# attack: issue 32: a repr that lies about its length (a str subclass whose __len__ says 1) passes the size check while its frame is far larger than the result pipe, which the server drains only after the child exits: the child stalls on the pipe until the wall limit, an outcome the program chooses (the rerun then kept the task)
# expect: output_too_large output_too_large
# calls: ["0"]
# ruff: noqa
class Liar(str):
    def __len__(self):
        return 1
class Big:
    def __repr__(self):
        return Liar('x' * 3_000_000)
def f(x):
    return Big()
