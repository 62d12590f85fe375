# attack: list the directory above the work directory, looking for other programs' files or the host's
# expect: ok|error runtime_error:PermissionError
# calls: ["0"]
# ruff: noqa
# values: ["[]"]
import os, sys
def f(x):
    runtime = {'dev', 'etc', 'lib', 'lib64', 'proc', 'usr', 'work', 'root', 'opt', 'home'}
    seen = sorted(set(os.listdir('..')) - runtime)  # /tmp, /var, the project, other programs' dirs...
    for top in ('/root', '/home', '/opt'):  # only the way to the Python installation, if it lives there
        if os.path.isdir(top):
            parts = os.path.relpath(sys.base_prefix, top).split(os.sep)
            seen += [os.path.join(top, n) for n in os.listdir(top) if n != parts[0]]
    return seen
