# attack: an exception message with newlines, ESC sequences and 50,000 characters (it reaches logs and terminals)
# expect: error runtime_error:ValueError
# calls: ["0"]
# ruff: noqa
def f(x):
    raise ValueError('line\nbreak\x1b[31mred\x1b[0m\r' * 5000)
