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

Nothing here raises on model text: a malformed completion gives ``reason="format"``.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

from populora.tasks.records import FORMAT, Proposal

ANSWER_OPEN = "<answer>"
ANSWER_CLOSE = "</answer>"
# ```kind<newline> ... ``` ; the kind label is optional; the closing fence may follow text directly.
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\r?\n(.*?)```", re.DOTALL)

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


def pick_block(answer: str, kind: str, require_fence: bool = False) -> str | None:
    """The payload of kind ``kind`` in an answer text (see module rules), or None."""
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


def last_block(answer: str, kind: str) -> str | None:
    """The last block of ``kind`` (else the last unlabelled block) in a teacher's answer: fences required."""
    return pick_block(answer, kind, require_fence=True)


def answer_field(text: str, kind: str, require_fence: bool = False, require_answer_tag: bool = True) -> str | None:
    """The payload of kind ``kind`` in the completion ``text`` (see module rules), or None."""
    answer = extract_answer(text, require_answer_tag)
    return None if answer is None else pick_block(answer, kind, require_fence)


@dataclass(frozen=True)
class StudentAnswer:
    """A student's parsed answer: ``answer`` is None and ``reason == "format"`` when malformed."""

    answer: str | None
    format_ok: bool
    reason: str | None = None


def think_format_ok(text: str) -> bool:
    """AZR's format check (``tasks.require_think``): the completion, which continues the prompt's
    ``<think>``, closes its reasoning with ``</think>`` and then answers in ``<answer>...</answer>``."""
    from populora.tasks.azr_templates import r1_format_ok

    return isinstance(text, str) and r1_format_ok(text)


def parse_student_answer(
    text: str, task_type: str, require_fence: bool = False, require_answer_tag: bool = True,
    require_think: bool = False,
) -> StudentAnswer:
    """Extract and grammar-check a student's answer for a task of ``task_type``. Never raises on model text."""
    from populora.tasks.kinds import get_kind

    kind = get_kind(task_type)
    if require_think and not think_format_ok(text):
        return StudentAnswer(None, False, FORMAT)
    payload = answer_field(text, kind.student_block, require_fence, require_answer_tag)
    try:
        ok = payload is not None and kind.answer_ok(payload)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        ok = False
    if not ok:
        return StudentAnswer(None, False, FORMAT)
    return StudentAnswer(payload, True, None)


def parse_proposal(
    text: str,
    task_type: str,
    program: str | None = None,
    teacher_id: str = "",
    step: int = 0,
    require_answer_tag: bool = True,
    require_think: bool = False,
) -> Proposal:
    """Parse a teacher completion into a ``Proposal``: the kind reads its answer block (``program`` is
    the buffer program a ``given_program`` kind's teacher was given). Never raises on model text."""
    from populora.tasks.kinds import get_kind

    kind = get_kind(task_type)
    if kind.given_program and program is None:
        raise ValueError(f"parse_proposal: a {task_type} proposal needs the program given to the teacher")
    common = dict(type=task_type, teacher_id=teacher_id, step=step, completion=text if isinstance(text, str) else "")
    answer = extract_answer(text, require_answer_tag)
    if answer is None or (require_think and not think_format_ok(text)):
        return Proposal(program=program or "", reason=FORMAT, **common)
    return kind.parse_proposal(answer, program, common)
