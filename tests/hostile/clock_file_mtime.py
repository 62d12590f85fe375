# attack: issue 37: the time as the modification time of a file the program writes (tmpfs stamps every write)
# expect: error runtime_error:PermissionError
# validate: runtime_error:PermissionError
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    with open('stamp', 'w') as fh:
        fh.write('now')
    return int(os.stat('stamp').st_mtime) // 8
