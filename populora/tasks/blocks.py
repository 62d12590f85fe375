"""Model text, read: the payload of the last ``<answer>`` block, then fenced blocks of a kind.

The rules are in ``parsing.py``'s docstring; what a task kind reads from these blocks is the
kind's own (``populora.tasks.kinds``). Nothing here raises on model text.
"""

from __future__ import annotations

import re
import textwrap

from populora.tasks.azr_templates import r1_format_ok

ANSWER_OPEN = "<answer>"
ANSWER_CLOSE = "</answer>"
# ```kind<newline> ... ``` ; the kind label is optional; the closing fence may follow text directly.
# Linear in the text: the blanks before and after an optional label are two runs that cannot share a
# character (the label, when present, separates them; without it there is one run). The former
# ```[ \t]*([A-Za-z0-9_+-]*)[ \t]*``` let both runs split one stretch of blanks in every way: 73 s
# on 64 KB of spaces after three backticks. A header whose body has no closing fence rescans the
# rest of the text once, and only the last header can lack one (any later fence closes it).
_FENCE = re.compile(r"```[ \t]*(?:([A-Za-z0-9_+-]+)[ \t]*)?\r?\n(.*?)```", re.DOTALL)

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
    return [((m.group(1) or "").lower(), m.group(2)) for m in _FENCE.finditer(text)]


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


def think_format_ok(text: str) -> bool:
    """AZR's format check (``tasks.require_think``): the completion, which continues the prompt's
    ``<think>``, closes its reasoning with ``</think>`` and then answers in ``<answer>...</answer>``."""
    return isinstance(text, str) and r1_format_ok(text)
