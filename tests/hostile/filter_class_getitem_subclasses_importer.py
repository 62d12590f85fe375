# attack: issue 32: __class_getitem__ set in a class namespace built at run time to type.__subclasses__: C[object] lists every class of the process; the builtin importer found there loads a fresh posix module, whose open reads the host's files
# expect: error runtime_error:FileNotFoundError
# filter: banned:type
# calls: ["0"]
# ruff: noqa
def f(x):
    C = type('C', (), {'__class_get' + 'item__': vars(type)['__subcl' + 'asses__']})
    classes = C[object]
    importer = [c for c in classes if c.__name__ == 'BuiltinImporter'][0]
    posix = importer.load_module('posix')
    return posix.open('/etc/passwd', posix.O_RDONLY)
