# attack: issue 37: the time as the modification time of the program's own output pipe, which moves with every write (fstat(1) after a print), and its inode number (a host counter)
# expect: error runtime_error:PermissionError
# validate: runtime_error:PermissionError
# calls: ["0"]
# ruff: noqa
import os, sys
def f(x):
    print('tick', flush=True)
    st = os.fstat(1)
    return [int(st.st_mtime) // 8, st.st_ino % 2]
