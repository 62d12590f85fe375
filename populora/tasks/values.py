"""Reading values from text and comparing them for tasks: never ``eval``, never plain ``==``.

Model text is read only with ``ast.literal_eval`` (extended to the names ``nan`` and ``inf``, which are
how ``repr`` writes non-finite floats), so nothing a model writes is executed in the trainer.

Comparison rule (``values_equal``): **type-strict structural equality**.

- Two values are equal only if they have the same type at every level: ``1 != 1.0``, ``True != 1``,
  ``(1, 2) != [1, 2]``, ``{1} != frozenset({1})``, ``'a' != b'a'``.
- Floats compare by value, except that NaN equals NaN (a program that returns NaN returns it in every
  run, so predicting NaN is right); ``-0.0 == 0.0`` (they are equal numbers; only their reprs differ).
- Containers compare element-wise (lists, tuples) or as unordered collections (sets, dicts: the same
  keys under this rule, mapped to equal values).

Python's ``==`` gets the task cases wrong: ``nan != nan`` would make NaN-returning tasks unsolvable,
while ``True == 1 == 1.0`` would accept a type error as the right answer.
"""

from __future__ import annotations

import ast
import math
from typing import Any

MAX_LITERAL_CHARS = 100_000  # longer text is not read (protects the parser; outputs are far shorter)

_NONFINITE = {"nan": math.nan, "inf": math.inf}


class _NonFinite(ast.NodeTransformer):
    """Turn the bare names ``nan``/``inf`` into float constants so ``literal_eval`` accepts them."""

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in _NONFINITE:
            return ast.copy_location(ast.Constant(_NONFINITE[node.id]), node)
        return node


class LiteralError(ValueError):
    """Text that is not a Python literal (the message says why)."""


def read_literal(text: str) -> Any:
    """The Python value written by ``text`` (a literal, as ``repr`` prints values). Raises LiteralError."""
    if not isinstance(text, str):
        raise LiteralError(f"expected text, got {type(text).__name__}")
    if len(text) > MAX_LITERAL_CHARS:
        raise LiteralError(f"literal of {len(text)} characters is over {MAX_LITERAL_CHARS}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
        return ast.literal_eval(_NonFinite().visit(tree))
    except Exception as exc:  # SyntaxError, ValueError, RecursionError, MemoryError-free text...
        raise LiteralError(f"not a literal: {type(exc).__name__}: {exc}"[:200]) from None


def read_arguments(text: str) -> tuple[Any, ...]:
    """The positional arguments written by ``text`` (``"1, [2]"`` -> ``(1, [2])``). Raises LiteralError.

    Only positional arguments made of literals are accepted (no keywords, no ``*args``), the same
    grammar the sandbox uses to call ``f``. Empty text is zero arguments.
    """
    if not isinstance(text, str):
        raise LiteralError(f"expected text, got {type(text).__name__}")
    if len(text) > MAX_LITERAL_CHARS:
        raise LiteralError(f"argument list of {len(text)} characters is over {MAX_LITERAL_CHARS}")
    try:
        call = ast.parse(f"f({text.strip()}\n)", mode="eval").body
    except Exception as exc:
        raise LiteralError(f"not an argument list: {type(exc).__name__}") from None
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name) or call.func.id != "f":
        raise LiteralError("not an argument list")
    if call.keywords:
        raise LiteralError("keyword arguments are not accepted")
    values = []
    for arg in call.args:
        if isinstance(arg, ast.Starred):
            raise LiteralError("starred arguments are not accepted")
        try:
            values.append(ast.literal_eval(_NonFinite().visit(arg)))
        except Exception as exc:
            raise LiteralError(f"argument is not a literal: {type(exc).__name__}") from None
    return tuple(values)


def canonical(value: Any) -> Any:
    """A hashable, type-tagged form of ``value`` such that ``canonical(a) == canonical(b)`` is the rule.

    Raises TypeError for values that are not literals (objects whose equality we cannot define).
    """
    t = type(value)
    if value is None or value is Ellipsis or t in (bool, int, str, bytes):
        return (t.__name__, value)
    if t is float:
        return ("float", "nan") if math.isnan(value) else ("float", value)
    if t is complex:
        return ("complex", canonical(value.real), canonical(value.imag))
    if t in (list, tuple):
        return (t.__name__, tuple(canonical(v) for v in value))
    if t in (set, frozenset):
        return (t.__name__, frozenset(canonical(v) for v in value))
    if t is dict:
        return ("dict", frozenset((canonical(k), canonical(v)) for k, v in value.items()))
    raise TypeError(f"cannot compare values of type {t.__name__}")


def values_equal(a: Any, b: Any) -> bool:
    """Type-strict structural equality with NaN == NaN (see the module docstring)."""
    try:
        return canonical(a) == canonical(b)
    except (TypeError, RecursionError):
        return False


def reprs_match(gold: str, candidate: str) -> bool:
    """Whether two value reprs (gold and candidate) denote the same value under ``values_equal``.

    Both are read as literals; when either is not a literal (a code_f output may be any repr), the
    texts must be identical.
    """
    try:
        return values_equal(read_literal(gold), read_literal(candidate))
    except LiteralError:
        return gold == candidate


def input_key(text: str) -> Any:
    """A key identifying an input by value (``"1,  [2]"`` and ``"1, [2]"`` give the same key)."""
    try:
        return canonical(read_arguments(text))
    except (LiteralError, TypeError, RecursionError):
        return ("text", text.strip())
