"""Program complexity of proposed tasks: the paper's "complexity up / complexity down" diagnostic.

For one program (the ``f`` of a task) ``program_complexity`` measures:

- ``ast_depth``: nodes on the longest root-to-leaf path of the AST below the ``Module`` node,
  not counting the ``Load``/``Store``/``Del`` context markers (``def f(x): return x`` has depth 3:
  ``FunctionDef > Return > Name`` and ``FunctionDef > arguments > arg``);
- ``cyclomatic``: McCabe cyclomatic complexity of the whole program, from radon: one plus every
  decision point (``if``, loop, ``and``/``or``, comprehension ``for``/``if``, ``except``, ...) in all
  of its functions and at module level, i.e. ``1 + sum(block complexity - 1)`` over radon's blocks;
- ``loc``: source lines of code (radon's ``sloc``: neither blank nor comment-only);
- ``variables``: distinct names the program binds: function parameters and names assigned
  (``Name`` in a store or delete context: assignment, ``for``/``with``/comprehension targets);
  function and class names are not variables;
- ``cognitive``: cognitive complexity (SonarSource's, from the ``cognitive_complexity`` package),
  summed over the program's top-level functions; nesting makes it grow faster than McCabe's.

``complexity_metrics(tasks, role_of)`` aggregates them per role and task type under stable names
(``complexity/<role>/<type>/<feature>``) so the step loop can log them; the report computes the
same aggregates post hoc from the tasks a run directory keeps (see ``runs.py``).

Note on ``code_f``: a code_f teacher writes inputs and a message for a program drawn from the
buffers, so code_f complexity describes which programs were reused, not programs it wrote.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

from cognitive_complexity.api import get_cognitive_complexity
from radon.raw import analyze
from radon.visitors import ComplexityVisitor

FEATURES = ("ast_depth", "cyclomatic", "loc", "variables", "cognitive")

_CONTEXTS = (ast.Load, ast.Store, ast.Del)


@dataclass(frozen=True)
class ProgramComplexity:
    ast_depth: int
    cyclomatic: int
    loc: int
    variables: int
    cognitive: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def ast_depth(tree: ast.AST) -> int:
    """Longest root-to-leaf path below ``tree`` (its children count 1), context markers excluded."""
    # iterative: a deeply nested program must not hit Python's recursion limit
    best = 0
    stack = [(child, 1) for child in ast.iter_child_nodes(tree) if not isinstance(child, _CONTEXTS)]
    while stack:
        node, depth = stack.pop()
        best = max(best, depth)
        stack.extend((c, depth + 1) for c in ast.iter_child_nodes(node) if not isinstance(c, _CONTEXTS))
    return best


def cyclomatic(source: str) -> int:
    """McCabe complexity of the whole program: 1 + the decision points of every block (radon)."""
    v = ComplexityVisitor.from_code(source)
    # radon scores each function (1 + its decisions) without its closures, each method inside
    # its class, and module-level code as ``v.complexity``; add every block's decisions once
    blocks = list(v.functions) + [m for c in v.classes for m in c.methods]
    decisions = v.complexity - 1
    while blocks:
        b = blocks.pop()
        decisions += b.complexity - 1
        blocks.extend(b.closures)
    return 1 + decisions


def bound_names(tree: ast.AST) -> set[str]:
    """Function parameters and names assigned anywhere in ``tree``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def cognitive(tree: ast.Module) -> int:
    """Cognitive complexity summed over the top-level functions (module code is not scored)."""
    total = 0
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            total += get_cognitive_complexity(node)
        elif isinstance(node, ast.ClassDef):
            total += sum(get_cognitive_complexity(n) for n in node.body
                         if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return total


def program_complexity(source: str) -> ProgramComplexity | None:
    """All features of one program; None when it does not parse (never the case for a valid task)."""
    try:
        tree = ast.parse(source)
        cc = cyclomatic(source)
        loc = analyze(source).sloc
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return ProgramComplexity(
        ast_depth=ast_depth(tree), cyclomatic=cc, loc=loc, variables=len(bound_names(tree)), cognitive=cognitive(tree)
    )


def mean_features(programs: Iterable[str]) -> dict[str, float]:
    """Mean of every feature over the programs that parse (empty dict when none does)."""
    rows = [c for c in map(program_complexity, programs) if c is not None]
    if not rows:
        return {}
    return {f: sum(getattr(c, f) for c in rows) / len(rows) for f in FEATURES}


def complexity_metrics(tasks: Iterable, role_of: Callable[[str], str]) -> dict[str, float]:
    """``complexity/<role>/<type>/<feature>`` (and ``/all/`` over types) for one step's valid tasks.

    ``tasks`` are ``Task`` records (anything with ``.type``, ``.program``, ``.teacher_id``);
    ``role_of(teacher_id)`` gives the author's role (``teacher`` or, in the baseline, ``agent``).
    Meant to be logged by the step loop on the step's fresh valid tasks.
    """
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for t in tasks:
        role = role_of(t.teacher_id)
        groups[(role, t.type)].append(t.program)
        groups[(role, "all")].append(t.program)
    out = {}
    for (role, tt), programs in sorted(groups.items()):
        for f, v in mean_features(programs).items():
            out[f"complexity/{role}/{tt}/{f}"] = v
    return out
