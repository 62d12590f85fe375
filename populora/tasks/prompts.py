"""Prompts of the task environment: the kinds' questions, the wrappers, the answer prefills.

Each task kind (``populora.tasks.kinds``) writes its own teacher (proposer) and student (solver)
question from its template set (``tasks.templates``: ``azr``, AZR's templates in ``azr_templates.py``,
the default; ``compact``, our short ones in ``kinds/compact.py``). Each question is then wrapped
(``tasks.prompt_style``): ``format_r1`` (the AZR "conversation between User and Assistant" wrapper) or
``format_chat`` (the tokenizer's chat template) turns it into the text the model continues, ending
with an opened ``<think>`` so the model starts by reasoning; ``wrap`` picks the one the environment
names, and ``prefill`` appends the kind's opened answer block when ``tasks.answer_prefill`` is on.

A prompt never ends in a bare newline right before the model writes: with byte-level BPE tokenizers a
trailing ``"\\n"`` splits the token the model would have produced for ``"\\n    "`` or ``"\\ndef"`` and
valid-code rates collapse. Both wrappers end in ``<think>``; ``check_prompt_ending`` guards it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from populora.tasks.kinds.registry import get_kind
from populora.tasks.records import Task

if TYPE_CHECKING:
    from populora.tasks.config import TaskEnv

THINK_OPEN = "<think>"

R1_TEMPLATE = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
    "The assistant first thinks about the reasoning process in the mind and then provides the user with "
    "the answer. The reasoning process and answer are enclosed within <think> </think> and <answer> "
    "</answer> tags, respectively, i.e., <think> reasoning process here </think> <answer> answer here "
    "</answer>.\nUser: {question}\nAssistant: <think>"
)

def teacher_prompt(task_type: str, references: Sequence[Task], env: TaskEnv, program: str | None = None) -> str:
    """The teacher's question for a task type (unwrapped; see ``wrap``): the kind's own template in
    ``env.templates``' set. ``references`` are the K tasks sampled from the buffer of this type; a
    ``given_program`` kind (code_f) needs ``program``."""
    return get_kind(task_type).teacher_question(references, program, env)


def student_prompt(task: Task, env: TaskEnv) -> str:
    """The student's question for one task (unwrapped)."""
    return get_kind(task.type).student_question(task, env)


def check_prompt_ending(prompt: str) -> str:
    """Return ``prompt`` unchanged, or raise ValueError if it ends in whitespace (see module docstring)."""
    if not prompt or prompt != prompt.rstrip():
        raise ValueError(
            f"prompt ends in whitespace (tail {prompt[-20:]!r}); it must end where the model writes"
        )
    return prompt


def format_r1(question: str) -> str:
    """AZR's R1 wrapper: ``... User: {question}\\nAssistant: <think>``."""
    return check_prompt_ending(R1_TEMPLATE.format(question=question.strip()))


def format_chat(question: str, tokenizer) -> str:
    """The tokenizer's chat template with a generation prompt, then ``<think>`` prefilled.

    The R1 instruction (think, then answer in tags) is given as the system message; ``tokenizer`` is a
    Hugging Face tokenizer with a chat template.
    """
    system = R1_TEMPLATE.split("\nUser:")[0]
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question.strip()}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return check_prompt_ending(text + THINK_OPEN)


def wrap(question: str, env: TaskEnv, tokenizer=None) -> str:
    """``question`` in the wrapper ``env.prompt_style`` names: ``r1`` (``format_r1``) or ``chat``
    (``format_chat`` with ``tokenizer``)."""
    return format_r1(question) if env.prompt_style == "r1" else format_chat(question, tokenizer)


def prefill(role: str, task_type: str, env: TaskEnv) -> str:
    """The answer prefill of a role for small models when ``env.answer_prefill`` is on (else ""):
    appended after the wrapper's ``<think>``, it skips the reasoning and opens the answer block, so
    that the model only has to continue the code or value. None of them ends in whitespace (see
    ``check_prompt_ending``)."""
    if not env.answer_prefill:
        return ""
    kind = get_kind(task_type)
    return kind.teacher_prefill if role == "teacher" else kind.student_prefill
