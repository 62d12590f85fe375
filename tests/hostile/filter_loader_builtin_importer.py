# attack: issue 32: the builtin importer through a module's __loader__, read with __getattr__ forwarding set in a class namespace built at run time: a fresh posix module, then the host's files
# expect: error runtime_error:FileNotFoundError
# filter: banned:type
# calls: ["0"]
# ruff: noqa
import itertools
def f(x):
    Get = type('Get', (), {'__get' + 'attr__': lambda self, name: vars(itertools)[name]})
    importer = getattr(Get(), '__load' + 'er__')
    posix = importer.load_module('posix')
    return posix.open('/etc/passwd', posix.O_RDONLY)
