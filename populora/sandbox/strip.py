"""The runtime strip layer: once a program is loaded, nothing that grants I/O, processes, clocks,
randomness or imports is reachable from its objects.

The second of the four layers (``docs/sandbox.md``, "Defence in layers"): the AST filter
(``populora/tasks/safety.py``) rejects a program that names a banned capability; this layer makes a
program that gets past the filter (a general attribute getter built from some C-level lookup, say)
find nothing to use; the operating-system sandbox contains whatever is left; the determinism check
rejects what differs between runs.

A fork server started with ``strip`` (``Program.strip``) runs ``prepare()`` once, after its
preloads and before its first child, so every child inherits the stripped interpreter at no cost of
its own; the child then runs ``strip_child()`` after its confinement, once the program is
compiled and its inputs parsed, right before the program's module body runs. What ``prepare`` does:

* **modules are sanitized.** Every loaded module other than the capability modules
  (``CAPABILITY_MODULES``: ``os``, ``io``, ``time``, ``random``, ``signal``, ``ctypes``, the import
  machinery...) and the sandbox's own loses every entry that leads to a capability: a capability
  module is replaced by a stub that holds only its harmless members (``HARMLESS``: ``_thread``'s
  ``get_ident`` and locks; ``sys`` gets ``SysStub``: numbers and a few pure functions), a member of
  one (a function, a class, an instance such as ``os.environ``) is deleted unless harmless;
  ``__loader__`` and ``__spec__`` (the importers) go from every module;
* **the interpreter's paths from an object to the whole process are removed** from the built-in
  types (``REMOVED_ATTRIBUTES``): ``type.__subclasses__`` (every class of the process, ``FileIO``
  and the importers included; ``ABCMeta`` gets a ``__subclasses__`` of its own, for ABCs only,
  because ``abc``'s subclass checks call it), a function's ``__globals__``, ``__closure__`` and
  ``__builtins__``, a frame's ``f_back``, ``f_globals``, ``f_locals`` and ``f_builtins`` (the
  frames above the program are the fork server's), a built-in function's ``__self__`` (its
  module);
* warnings are ignored (showing one writes to ``sys.stderr``, which a stripped library no longer
  reaches).

``strip_child()`` then strips ``builtins`` in the child (``open``, ``input``, ``breakpoint``,
``help`` and the importers go; ``__import__`` gives only modules already loaded and sanitized: no
new module can be loaded, the import machinery is a capability). The capability modules stay
loaded, untouched (the fork server's own code uses them, and emptying them in every child costs
about 2 ms of copy-on-write faults per program, as much as the rest of the child): nothing
reachable leads to them any more.

What stays reachable by design: the program's own objects, the allowlisted modules and the
sanitized modules they use (``inspect``, ``ast``, ``weakref``...), the values ``id()`` and
``hash()`` give (the determinism check's business), ``print`` to the captured output, and the
interpreter's code-building builtins (``compile``, ``exec``, ``eval``): they run code with the
same stripped reach. ``tests/hostile/strip_walk_everything.py`` is a program that walks everything
reachable by attribute access from its namespace and names what it finds of the capability modules;
``tests/test_sandbox_strip.py`` runs it in a stripped child.

Standard library only: the fork server imports it as a top-level module. Written for CPython 3.10+
(it deletes entries of built-in types' dictionaries and tells the interpreter with
``PyType_Modified``).
"""

from __future__ import annotations

import builtins
import gc
import sys
import types

# Modules whose members grant I/O, processes, clocks, randomness, imports or the interpreter's
# internals; prefixes end with a dot. The sandbox's own modules (``is_own``) are left as they are: nothing
# reaches them once the frames and globals paths are gone.
CAPABILITY_MODULES = frozenset(
    """sys builtins os posix nt posixpath ntpath genericpath os.path io _io _pyio time random _random
    secrets uuid _uuid datetime _datetime signal _signal _thread threading select selectors fcntl
    resource termios tty pty ctypes _ctypes gc marshal _imp zipimport _frozen_importlib
    _frozen_importlib_external importlib linecache tokenize socket _socket ssl _ssl subprocess
    _posixsubprocess mmap faulthandler atexit tracemalloc _tracemalloc pwd grp spwd shutil tempfile
    pathlib glob pickle _pickle shelve dbm sqlite3 _sqlite3 multiprocessing _multiprocessing
    concurrent asyncio _asyncio sched code codeop pdb bdb trace cProfile profile _lsprof pydoc
    runpy pkgutil zipfile tarfile site _sitebuiltins sysconfig _sysconfigdata platform
    _posixshmem _ctypes_test webbrowser urllib http ftplib smtplib poplib imaplib telnetlib
    xmlrpc _winapi msvcrt winreg readline rlcompleter curses _curses getpass""".split()
)
CAPABILITY_PREFIXES = ("os.", "importlib.", "ctypes.", "multiprocessing.", "concurrent.", "asyncio.",
                       "urllib.", "http.", "xmlrpc.", "dbm.", "sqlite3.", "curses.", "_sysconfigdata")
OWN_DIR = __file__.rsplit("/", 1)[0]  # the sandbox's own modules (the fork server imports them top-level)
# members of capability modules that grant nothing and that sanitized modules use at run time
# (dataclasses' and reprlib's recursion guards key on the thread id)
HARMLESS = {
    "_thread": frozenset({"get_ident", "RLock", "allocate_lock", "LockType", "lock", "error", "TIMEOUT_MAX"}),
}
REMOVED_BUILTINS = ("open", "input", "breakpoint", "help", "exit", "quit", "copyright", "credits",
                    "license", "__loader__", "__spec__")
# (type, attribute names): the interpreter's ways from an object to the rest of the process
REMOVED_ATTRIBUTES = (
    (type, ("__subclasses__",)),
    (types.FunctionType, ("__globals__", "__closure__", "__builtins__")),
    (types.FrameType, ("f_back", "f_globals", "f_locals", "f_builtins")),
    (types.BuiltinFunctionType, ("__self__",)),
)


def is_capability_module(name: str) -> bool:
    return name in CAPABILITY_MODULES or name.startswith(CAPABILITY_PREFIXES)


def is_own(name: str, module) -> bool:
    """The fork server's script (``__main__``) and the modules of this directory."""
    where = getattr(module, "__file__", None)
    return name == "__main__" or (isinstance(where, str) and where.rsplit("/", 1)[0] == OWN_DIR)


class _FakeFrame:
    """What the stub's ``_getframe`` returns: libraries read ``f_globals['__name__']`` to name the
    module of a class they build (``namedtuple``, ``Enum('E', ...)``, ``TypeVar``)."""

    f_back = None
    f_lineno = 0

    def __init__(self) -> None:
        self.f_globals = {"__name__": "__main__"}
        self.f_locals = {}


def _sys_stub(modules: dict) -> types.ModuleType:
    """``sys`` as sanitized modules see it: numbers, version data and pure functions; no stream,
    no hook, no frame, no ``modules`` of the real interpreter."""
    stub = types.ModuleType("sys", "the sandbox's stand-in for sys (populora/sandbox/strip.py)")
    for name in ("maxsize", "maxunicode", "byteorder", "float_info", "int_info", "hash_info",
                 "float_repr_style", "version", "version_info", "hexversion", "api_version",
                 "implementation", "flags", "platform", "dont_write_bytecode"):
        if hasattr(sys, name):
            setattr(stub, name, getattr(sys, name))
    limit = sys.getrecursionlimit()
    stub.getrecursionlimit = lambda: limit
    stub.intern = lambda text: text
    stub.getdefaultencoding = lambda: "utf-8"
    stub.getfilesystemencoding = lambda: "utf-8"
    stub._getframe = lambda depth=0: _FakeFrame()
    stub._getframemodulename = lambda depth=0: "__main__"  # what typing and enum ask from 3.12 on
    stub.modules = modules
    stub.warnoptions = []
    stub.path = []
    return stub


def _stub(module: types.ModuleType) -> types.ModuleType:
    """A capability module as sanitized modules see it: its harmless members only."""
    stub = types.ModuleType(module.__name__, "stripped by the sandbox (populora/sandbox/strip.py)")
    for name in HARMLESS.get(module.__name__, ()):
        if hasattr(module, name):
            setattr(stub, name, getattr(module, name))
    return stub


def _module_of(value) -> str | None:
    """The module a value comes from, for the capability test (its own for a module)."""
    if isinstance(value, types.ModuleType):
        return value.__name__
    owner = getattr(value, "__self__", None) if isinstance(value, types.BuiltinFunctionType) else None
    if isinstance(owner, types.ModuleType):
        return owner.__name__
    if isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType)):
        name = getattr(value, "__module__", None)
        return name if isinstance(name, str) else None
    name = getattr(type(value), "__module__", None)
    return name if isinstance(name, str) else None


def _replacement(value, stubs: dict):
    """What a sanitized module holds instead of ``value``: the value itself, a stub, or ``_DROP``."""
    if isinstance(value, types.ModuleType):
        name = value.__name__
        if is_capability_module(name) and name != "builtins":  # builtins is stripped in place
            return stubs.setdefault(name, _stub(value)) if name != "sys" else stubs["sys"]
        return value
    name = _module_of(value)
    if name is None or not is_capability_module(name) or name == "builtins":
        return value
    member = getattr(value, "__name__", None) if isinstance(value, (type, types.FunctionType,
                                                                    types.BuiltinFunctionType)) else type(value).__name__
    if member in HARMLESS.get(name, ()):
        return value
    return _DROP


_DROP = object()
_state: dict = {}


def _real_dict(kind: type) -> dict:
    """The dictionary behind ``kind.__dict__`` (a read-only proxy for built-in types)."""
    return next(r for r in gc.get_referents(kind.__dict__) if isinstance(r, dict))


def _remove_attributes(own: set) -> list[str]:
    """Delete ``REMOVED_ATTRIBUTES`` from the built-in types and tell the interpreter (its
    attribute caches and the specialised instructions key on the types' version tags)."""
    import ctypes  # the fork server has it loaded already (isolation.py)

    subclasses = _real_dict(type).get("__subclasses__")
    import abc

    def abc_subclasses(cls):
        if not isinstance(cls, abc.ABCMeta):
            raise TypeError("__subclasses__ is only available on abstract base classes here")
        return [c for c in subclasses(cls) if not is_capability_module(getattr(c, "__module__", "") or "")
                and getattr(c, "__module__", None) not in own]

    abc_subclasses.__name__ = abc_subclasses.__qualname__ = "__subclasses__"
    removed = []
    for kind, names in REMOVED_ATTRIBUTES:
        table = _real_dict(kind)
        for name in names:
            if table.pop(name, None) is not None:
                removed.append(f"{kind.__name__}.{name}")
        ctypes.pythonapi.PyType_Modified(ctypes.py_object(kind))
    if subclasses is not None:
        abc.ABCMeta.__subclasses__ = abc_subclasses  # abc's subclass check calls it (step 6)
    sys._clear_type_cache()
    return removed


def prepare() -> dict:
    """Strip this interpreter (the fork server's, before its first child); returns a report.

    Must run after every module the programs may use is imported (nothing can be imported later).
    """
    if _state:
        return _state["report"]
    import warnings

    warnings.simplefilter("ignore")  # a shown warning would need the real sys.stderr
    loaded = dict(sys.modules)
    kept = {n: m for n, m in loaded.items()
            if isinstance(m, types.ModuleType) and not is_capability_module(n) and not is_own(n, m)}
    own = {n for n, m in loaded.items() if is_own(n, m)}
    stub_modules: dict = {}
    stubs = {"sys": _sys_stub(stub_modules)}
    dropped = replaced = 0
    for module in kept.values():
        table = module.__dict__
        for key in ("__loader__", "__spec__"):
            if table.pop(key, None) is not None:
                dropped += 1
        for key, value in list(table.items()):
            new = _replacement(value, stubs)
            if new is _DROP:
                del table[key]
                dropped += 1
            elif new is not value:
                table[key] = new
                replaced += 1
    stub_modules.update(kept)
    stub_modules.update({n: s for n, s in stubs.items() if n != "sys"})
    stub_modules["sys"] = stubs["sys"]
    stub_modules["__main__"] = main = types.ModuleType("__main__")
    removed = _remove_attributes(own)

    def importer(name, globals=None, locals=None, fromlist=(), level=0):
        if level:
            raise ImportError("relative imports are not available here")
        module = kept.get(name)
        if module is None:
            raise ModuleNotFoundError(f"No module named {name!r} (not loaded, or a capability)", name=name)
        if fromlist:
            return module
        return kept.get(name.partition(".")[0], module)

    importer.__name__ = importer.__qualname__ = "__import__"
    _state.update(
        importer=importer,
        main=main,
        report={"modules_kept": len(kept), "entries_dropped": dropped, "entries_stubbed": replaced,
                "attributes_removed": removed},
    )
    return _state["report"]


def strip_child() -> dict:
    """In a child of a stripped server, after its confinement and before the program runs: strip
    ``builtins`` (the server keeps its own: the interpreter imports ``resource`` lazily for
    ``os.wait4``). Returns the namespace the program runs in: that of the
    ``__main__`` module the stripped ``sys.modules`` holds (dataclasses look a class's module up
    there)."""
    table = builtins.__dict__
    for name in REMOVED_BUILTINS:
        table.pop(name, None)
    table["__import__"] = _state["importer"]
    return _state["main"].__dict__
