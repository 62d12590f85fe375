"""Parsing completions: the payload of the last ``<answer>`` block, then fenced blocks of a kind.

Completions follow the R1 wrapper: reasoning inside ``<think>...</think>``, answer inside
``<answer>...</answer>``; inside the answer, fenced blocks labelled with their kind::

    <answer>
    ```python
    def f(x):
        return x
    ```
    ```input
    3
    ```
    </answer>

Rules (the same for teachers and students):

- with ``require_think`` (AZR's format check, the run default) the completion must first close its
  reasoning with ``</think>`` and then open ``<answer>``;
- the answer is the text between the **last** ``<answer>`` and the first ``</answer>`` after it (so a
  draft answer in the reasoning is ignored, and in ``<answer><answer>x</answer></answer>`` the answer
  is ``x``); an unclosed last ``<answer>`` (a truncated generation) is a format failure;
- a single-valued field is the **last** fenced block of the expected kind; when the answer holds no
  block of that kind, an unlabelled fenced block is taken, and when it holds no fenced block at all,
  the whole answer text is taken (unless ``require_fence``);
- the payload must then have the grammar of the answer: a Python literal (code_o output), an argument
  list of literals (code_i input), a program that parses (code_f); otherwise it is a format failure.

The task environment (``TaskEnv``) says which rules are on (``require_think``, ``require_answer_tag``,
``require_fence``); the task kind reads its own blocks (``populora.tasks.kinds``), and the text-level
helpers are in ``blocks.py``. Nothing here raises on model text: a malformed completion gives
``reason="format"``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from populora.tasks.blocks import answer_field, extract_answer, think_format_ok
from populora.tasks.kinds.registry import get_kind
from populora.tasks.records import FORMAT, Proposal

if TYPE_CHECKING:
    from populora.tasks.config import TaskEnv


@dataclass(frozen=True)
class StudentAnswer:
    """A student's parsed answer: ``answer`` is None and ``reason == "format"`` when malformed."""

    answer: str | None
    format_ok: bool
    reason: str | None = None


def parse_student_answer(text: str, task_type: str, env: TaskEnv) -> StudentAnswer:
    """Extract and grammar-check a student's answer for a task of ``task_type`` under ``env``'s format
    rules. Never raises on model text."""
    kind = get_kind(task_type)
    if env.require_think and not think_format_ok(text):
        return StudentAnswer(None, False, FORMAT)
    payload = answer_field(text, kind.student_block, env.require_fence, env.require_answer_tag)
    try:
        ok = payload is not None and kind.answer_ok(payload)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        ok = False
    if not ok:
        return StudentAnswer(None, False, FORMAT)
    return StudentAnswer(payload, True, None)


def parse_proposal(text: str, task_type: str, env: TaskEnv, *, program: str | None = None, teacher_id: str = "",
                   step: int = 0) -> Proposal:
    """Parse a teacher completion into a ``Proposal`` under ``env``'s format rules: the kind reads its
    answer block (``program`` is the buffer program a ``given_program`` kind's teacher was given).
    Never raises on model text."""
    kind = get_kind(task_type)
    if kind.given_program and program is None:
        raise ValueError(f"parse_proposal: a {task_type} proposal needs the program given to the teacher")
    common = dict(type=task_type, teacher_id=teacher_id, step=step, completion=text if isinstance(text, str) else "")
    answer = extract_answer(text, env.require_answer_tag)
    if answer is None or (env.require_think and not think_format_ok(text)):
        return Proposal(program=program or "", reason=FORMAT, **common)
    return kind.parse_proposal(answer, program, common)
