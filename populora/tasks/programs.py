"""Static checks of a program, before anything runs: it parses, defines the entry function, and passes
the AST safety check (``safety.py``).

The same rules apply to a teacher's program (``validation.py``) and to a student's program for an
induction task (``code_f``'s check), so both ask here. Helpers, nested functions and classes are
allowed; a second ``def`` is not a rejection (the AZR reference rejected it although its prompt
allowed helpers).
"""

from __future__ import annotations

import ast

from populora.tasks.records import NO_ENTRY_FUNCTION, SYNTAX_ERROR
from populora.tasks.safety import SafetyConfig, check_program


def has_entry_function(tree: ast.Module, entry: str = "f") -> bool:
    """Whether the module defines ``entry`` as a top-level function (other defs are fine)."""
    return any(isinstance(node, ast.FunctionDef) and node.name == entry for node in tree.body)


def program_reason(program: str, entry: str, safety: SafetyConfig) -> str | None:
    """Reason a program cannot be a task without running it (``syntax_error``, ``no_entry_function``,
    ``banned:<name>``), or None."""
    try:
        tree = ast.parse(program)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return SYNTAX_ERROR
    if not has_entry_function(tree, entry):
        return NO_ENTRY_FUNCTION
    return check_program(tree, safety)
