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

- the answer is the text between the **last** ``<answer>`` and the first ``</answer>`` after it (so a
  draft answer in the reasoning is ignored, and in ``<answer><answer>x</answer></answer>`` the answer
  is ``x``); an unclosed last ``<answer>`` (a truncated generation) is a format failure;
- a single-valued field is the **last** fenced block of the expected kind; when the answer holds no
  block of that kind, an unlabelled fenced block is taken, and when it holds no fenced block at all,
  the whole answer text is taken (unless ``require_fence``);
- the payload must then have the grammar of the answer: a Python literal (code_o output), an argument
  list of literals (code_i input), a program that parses (code_f); otherwise it is a format failure.

Nothing here raises on model text: a malformed completion gives ``reason="format"``.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass

from populora.tasks.records import CODE_F, CODE_I, CODE_O, FORMAT, Proposal
from populora.tasks.values import LiteralError, read_arguments, read_literal

ANSWER_OPEN = "<answer>"
ANSWER_CLOSE = "</answer>"
# ```kind<newline> ... ``` ; the kind label is optional; the closing fence may follow text directly.
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\r?\n(.*?)```", re.DOTALL)

# The fenced-block kind a student writes for each task type.
STUDENT_ANSWER_KIND = {CODE_O: "output", CODE_I: "input", CODE_F: "python"}


THINK_CLOSE = "</think>"


def extract_answer(text: str, require_answer_tag: bool = True) -> str | None:
    """Text of the last ``<answer>`` block, or None when there is none or it is not closed.

    With ``require_answer_tag=False`` (for small models that write fenced blocks but no tags, e.g.
    SmolLM2-135M in the CPU demo) a completion without any ``<answer>`` tag is read whole, after
    its last ``</think>`` if there is one; the fenced-block rules below still apply.
    """
    if not isinstance(text, str):
        return None
    start = text.rfind(ANSWER_OPEN)
    if start < 0:
        if require_answer_tag:
            return None
        return text[text.rfind(THINK_CLOSE) + len(THINK_CLOSE):] if THINK_CLOSE in text else text
    start += len(ANSWER_OPEN)
    end = text.find(ANSWER_CLOSE, start)
    if end < 0:
        return None if require_answer_tag else text[start:]
    return text[start:end]


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """All fenced blocks of ``text`` in order, as ``(kind, content)``; kind is lower case, may be ''."""
    return [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(text)]


def _clean(block: str, kind: str) -> str:
    if kind == "python":
        return textwrap.dedent(block).strip("\n").rstrip()
    return block.strip()


def blocks_of_kind(answer: str, kind: str) -> list[str]:
    """Contents of every block labelled ``kind`` in ``answer``, cleaned, in order."""
    return [_clean(content, kind) for k, content in fenced_blocks(answer) if k == kind]


def answer_field(text: str, kind: str, require_fence: bool = False, require_answer_tag: bool = True) -> str | None:
    """The payload of kind ``kind`` in the completion ``text`` (see module rules), or None."""
    answer = extract_answer(text, require_answer_tag)
    if answer is None:
        return None
    blocks = fenced_blocks(answer)
    labelled = [c for k, c in blocks if k == kind]
    if labelled:
        payload = labelled[-1]
    elif any(k == "" for k, _ in blocks):
        payload = [c for k, c in blocks if k == ""][-1]
    elif not blocks and "```" not in answer and not require_fence:
        payload = answer
    else:
        return None
    payload = _clean(payload, kind)
    return payload or None


@dataclass(frozen=True)
class StudentAnswer:
    """A student's parsed answer: ``answer`` is None and ``reason == "format"`` when malformed."""

    answer: str | None
    format_ok: bool
    reason: str | None = None


def parse_student_answer(
    text: str, task_type: str, require_fence: bool = False, require_answer_tag: bool = True
) -> StudentAnswer:
    """Extract and grammar-check a student's answer for a task of ``task_type``. Never raises."""
    kind = STUDENT_ANSWER_KIND.get(task_type)
    if kind is None:
        raise ValueError(f"unknown task type {task_type!r}")
    payload = answer_field(text, kind, require_fence, require_answer_tag)
    if payload is None or not _has_grammar(payload, task_type):
        return StudentAnswer(None, False, FORMAT)
    return StudentAnswer(payload, True, None)


def _has_grammar(payload: str, task_type: str) -> bool:
    try:
        if task_type == CODE_O:
            read_literal(payload)
        elif task_type == CODE_I:
            if not read_arguments(payload):
                return False
        else:
            ast.parse(payload)
    except (LiteralError, SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def parse_proposal(
    text: str,
    task_type: str,
    program: str | None = None,
    teacher_id: str = "",
    step: int = 0,
    require_fence: bool = True,
    require_answer_tag: bool = True,
) -> Proposal:
    """Parse a teacher completion into a ``Proposal``. Never raises on model text.

    code_o/code_i: a ``python`` block (the program) and an ``input`` block (the last of each).
    code_f: ``program`` is the buffer program the teacher was given; the completion holds ``input``
    blocks (all of them, in order) and a ``message`` block. Teachers must use fences
    (``require_fence=True``) because their answer has several fields.
    """
    common = dict(
        type=task_type, teacher_id=teacher_id, step=step, completion=text if isinstance(text, str) else ""
    )
    answer = extract_answer(text, require_answer_tag)
    if answer is None:
        return Proposal(program=program or "", reason=FORMAT, **common)
    if task_type in (CODE_O, CODE_I):
        code = answer_field(text, "python", require_fence, require_answer_tag)
        inputs = blocks_of_kind(answer, "input")
        if code is None or not inputs or not inputs[-1]:
            return Proposal(program=code or "", reason=FORMAT, **common)
        return Proposal(program=code, inputs=(inputs[-1],), **common)
    if task_type == CODE_F:
        if program is None:
            raise ValueError("parse_proposal: a code_f proposal needs the program given to the teacher")
        inputs = tuple(i for i in blocks_of_kind(answer, "input") if i)
        messages = [m for m in blocks_of_kind(answer, "message") if m]
        if not inputs or not messages:
            return Proposal(program=program, inputs=inputs, reason=FORMAT, **common)
        return Proposal(program=program, inputs=inputs, message=messages[-1], **common)
    raise ValueError(f"unknown task type {task_type!r}")
