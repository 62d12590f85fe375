"""Prompts of the task environment: the kinds' questions, the wrappers, the answer prefills.

Each task kind (``populora.tasks.kinds``) writes its own teacher (proposer) and student (solver)
question, with AZR's templates (``azr_templates.py``, ``tasks.templates: azr``, the default) or our
short ones (``kinds/compact.py``, ``compact``). Each question is then wrapped: ``format_r1`` (the AZR "conversation between User and
Assistant" wrapper) or ``format_chat`` (the tokenizer's chat template) turns it into the text the model
continues, ending with an opened ``<think>`` so the model starts by reasoning.

A prompt never ends in a bare newline right before the model writes: with byte-level BPE tokenizers a
trailing ``"\\n"`` splits the token the model would have produced for ``"\\n    "`` or ``"\\ndef"`` and
valid-code rates collapse. Both wrappers end in ``<think>``; ``check_prompt_ending`` guards it.
"""

from __future__ import annotations

from collections.abc import Sequence

from populora.tasks.records import Task

THINK_OPEN = "<think>"

R1_TEMPLATE = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
    "The assistant first thinks about the reasoning process in the mind and then provides the user with "
    "the answer. The reasoning process and answer are enclosed within <think> </think> and <answer> "
    "</answer> tags, respectively, i.e., <think> reasoning process here </think> <answer> answer here "
    "</answer>.\nUser: {question}\nAssistant: <think>"
)

def teacher_prompt(task_type: str, references: Sequence[Task], program: str | None = None, env=None) -> str:
    """The teacher's question for a task type (unwrapped; see ``format_r1``/``format_chat``): the kind's
    own template (``env.templates``: ``azr`` or ``compact``). ``references`` are the K tasks sampled from
    the buffer of this type; a ``given_program`` kind (code_f) needs ``program``."""
    from populora.tasks.kinds import PromptEnv, get_kind

    return get_kind(task_type).teacher_question(references, program, env or PromptEnv())


def student_prompt(task: Task, env=None) -> str:
    """The student's question for one task (unwrapped)."""
    from populora.tasks.kinds import PromptEnv, get_kind

    return get_kind(task.type).student_question(task, env or PromptEnv())


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


def prefill(role: str, task_type: str) -> str:
    """The answer prefill of a role for small models (``tasks.answer_prefill``): appended after the
    wrapper's ``<think>``, it skips the reasoning and opens the answer block, so that the model only has
    to continue the code or value. None of them ends in whitespace (see ``check_prompt_ending``)."""
    from populora.tasks.kinds import get_kind

    kind = get_kind(task_type)
    return kind.teacher_prefill if role == "teacher" else kind.student_prefill
