# attack: issue 13 item 7 (AST filter: banned:__globals__): a match class pattern's keyword attribute reaches a function's globals, then the builtins' open
# expect: error runtime_error:FileNotFoundError
# calls: ["0"]
# ruff: noqa
def f(x):
    match f:
        case object(__globals__=g):
            return g['__builtins__'].open('/etc/passwd').read()[:10]
