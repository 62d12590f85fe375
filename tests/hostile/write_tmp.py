# attack: write a file in /tmp
# expect: error runtime_error:OSError|runtime_error:PermissionError|runtime_error:FileNotFoundError
# calls: ["0"]
# ruff: noqa
def f(x):
    with open('/tmp/populora_pwned_write_tmp', 'w') as fh:
        fh.write('pwned')
