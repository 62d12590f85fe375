# attack: write files in /var/tmp and /dev/shm
# expect: error runtime_error:OSError|runtime_error:PermissionError|runtime_error:FileNotFoundError
# calls: ["0"]
# ruff: noqa
def f(x):
    for d in ('/var/tmp', '/dev/shm'):
        try:
            open(d + '/populora_pwned_write_var_tmp_and_shm', 'w').write('pwned')
        except OSError:
            pass
    open('/dev/shm/populora_pwned_write_var_tmp_and_shm', 'w').write('pwned')
