# attack: a 1,100-level directory tree with a file at each level, then files until the file system refuses (broke the old server's recursive cleanup)
# expect: error runtime_error:OSError
# calls: ["0"]
# ruff: noqa
import os
def f(x):
    for i in range(1100):
        os.mkdir('d')
        os.chdir('d')
        open('populora_pwned_leftover', 'w').write('left for the next program')
    for i in range(10**6):
        open(f'f{i}', 'w').close()
