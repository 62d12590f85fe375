"""What a sandbox child does with one program, after it has been confined.

``execute`` compiles the source (``syntax_error``), parses each call's argument text with
``ast.literal_eval`` (``bad_input``), executes the source as a fresh ``__main__`` module, looks up
the entry function (``no_entry_function``), calls it once per call and returns ``repr()`` of each
result. Any exception is ``runtime_error:<TypeName>``; ``MemoryError`` is ``memory``;
``SystemExit`` (``sys.exit``) is ``crashed:SystemExit`` (never a valid, empty output); a repr over
the limit is ``output_too_large`` (never truncated). A repr is taken as an exact ``str`` copy, so a
``str`` subclass that lies about its length (``__len__``) or its encoding cannot slip past the limit
or stall the result channel.

``before_run`` (the fork server's) is called once the program is compiled and its inputs parsed,
right before its module body runs: the server learns there that the child's setup is over.

An ``OSError`` with the errno the seccomp filter gives to clock calls (``ETIME``) or to entropy
calls (``ENODATA``) that reaches the top is ``refused:clock`` or ``refused:entropy``: the program
tried to read what a child does not have (``seccomp.py``; a clock read through the vDSO or
``rdtsc`` ends the child instead, ``clock.py``).

Standard library only: the fork server imports it as a top-level module.
"""

from __future__ import annotations

import ast
import builtins
import errno

# (status, reason, values, detail)
Result = tuple  # tuple[str, str, list[str], str]

MAX_DETAIL = 300


def parse_call(text: str) -> tuple[tuple, dict]:
    """``"1, [2, 3], k='x'"`` -> ``((1, [2, 3]), {'k': 'x'})``; only literals; ValueError otherwise."""
    if not text.strip():
        return (), {}
    try:
        tree = ast.parse(f"_({text}\n)", mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ValueError(f"argument text does not parse: {type(exc).__name__}") from None
    call = tree.body
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name) or call.func.id != "_":
        raise ValueError("argument text is not a plain argument list")
    args = []
    for node in call.args:
        if isinstance(node, ast.Starred):
            raise ValueError("starred arguments are not literals")
        args.append(ast.literal_eval(node))
    kwargs = {}
    for kw in call.keywords:
        if kw.arg is None:
            raise ValueError("**kwargs are not literals")
        kwargs[kw.arg] = ast.literal_eval(kw.value)
    return tuple(args), kwargs


def _detail(exc: BaseException) -> str:
    try:
        text = f"{type(exc).__name__}: {exc}"
    except BaseException:  # a program's exception whose __str__ itself raises
        text = type(exc).__name__
    return text[:MAX_DETAIL]


def _type_name(exc: BaseException) -> str:
    name = type(exc).__name__
    return name if isinstance(name, str) and name.isidentifier() else "Exception"


REFUSED = {errno.ETIME: "refused:clock", errno.ENODATA: "refused:entropy"}  # the filter's errnos


def _failure(exc: BaseException) -> Result:
    if isinstance(exc, MemoryError):
        return ("memory", "memory", [], _detail(exc))
    if isinstance(exc, OSError) and type(exc.errno) is int and exc.errno in REFUSED:
        return ("error", REFUSED[exc.errno], [], _detail(exc))
    if isinstance(exc, SystemExit):
        return ("crashed", "crashed:SystemExit", [], _detail(exc))
    return ("error", f"runtime_error:{_type_name(exc)[:80]}", [], _detail(exc))


def exact_text(text) -> str:
    """``repr()``'s result as an exact ``str`` (a subclass is copied by ``str.__str__``, which no
    override of the subclass reaches); TypeError for anything else."""
    if not isinstance(text, str):
        raise TypeError("__repr__ returned a non-string")
    return str.__str__(text)


def execute(source: str, entry: str | None, calls: list[str], max_output_chars: int,
            before_run=None) -> Result:
    try:
        code = compile(source, "<program>", "exec")
    except (SyntaxError, ValueError, OverflowError) as exc:  # ValueError: null bytes
        return ("error", "syntax_error", [], _detail(exc))
    except RecursionError as exc:  # deeply nested source
        return ("error", "syntax_error", [], _detail(exc))
    except MemoryError as exc:
        return ("memory", "memory", [], _detail(exc))
    try:
        parsed = [parse_call(text) for text in calls]
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError) as exc:
        return ("error", "bad_input", [], _detail(exc))
    if before_run is not None:
        before_run()
    module = {"__name__": "__main__", "__builtins__": builtins, "__file__": "<program>"}
    try:
        exec(code, module)
    except BaseException as exc:  # any exception a program raises is its outcome, not ours
        return _failure(exc)
    if entry is None:
        return ("ok", "", [], "")
    func = module.get(entry)
    if func is None or not callable(func):
        return ("error", "no_entry_function", [], f"no callable {entry!r} defined")
    values = []
    try:
        for args, kwargs in parsed:
            text = exact_text(repr(func(*args, **kwargs)))
            if len(text) > max_output_chars:
                return ("output_too_large", "output_too_large", [], f"repr of {len(text)} characters")
            values.append(text)
    except BaseException as exc:
        return _failure(exc)
    return ("ok", "", values, "")
