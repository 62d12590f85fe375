"""Prompt templates of the task environment, all in this one module.

Teacher (proposer) prompts: ``code_o``/``code_i`` ask for a new program ``f`` and one input, showing K
reference tasks (program, input, output) from the buffer of that type; ``code_f`` gives a program from
the buffer and asks for ``n_inputs`` inputs and a message that hints at what ``f`` does, showing K
earlier induction tasks as examples of inputs and messages. Student (solver) prompts show one task.

Each template produces the *question*; ``format_r1`` (the AZR "conversation between User and
Assistant" wrapper) or ``format_chat`` (the tokenizer's chat template) turns it into the text the model
continues, ending with an opened ``<think>`` so the model starts by reasoning.

A prompt never ends in a bare newline right before the model writes: with byte-level BPE tokenizers a
trailing ``"\\n"`` splits the token the model would have produced for ``"\\n    "`` or ``"\\ndef"`` and
valid-code rates collapse. Both wrappers end in ``<think>``; ``check_prompt_ending`` guards it.
"""

from __future__ import annotations

from collections.abc import Sequence

from populora.tasks.records import CODE_F, CODE_I, CODE_O, Task
from populora.tasks.safety import DEFAULT_ALLOWED_MODULES

THINK_OPEN = "<think>"

R1_TEMPLATE = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
    "The assistant first thinks about the reasoning process in the mind and then provides the user with "
    "the answer. The reasoning process and answer are enclosed within <think> </think> and <answer> "
    "</answer> tags, respectively, i.e., <think> reasoning process here </think> <answer> answer here "
    "</answer>.\nUser: {question}\nAssistant: <think>"
)

_CODE_RULES = """\
### Code requirements
- The entry function must be named `f`; helper functions, nested functions and classes are allowed.
- The program must be deterministic: same input, same output, in every run.
- Allowed imports: {modules}. No randomness, time or dates, files, input(), networking, \
eval/exec, or dunder attribute tricks; print() output is ignored.
- `f` must return a value (an int, float, str, bool, None, or a list/tuple/dict/set of them).
- The output's repr must be at most {max_output_chars} characters."""

_TEACHER_IO = """\
## Task: create a new Python program `f` and one input for it
Design a new program that is different from the references below and that needs real reasoning to \
{goal}. Then give one input for it.

{rules}

### Input requirements
- The input is the argument list of one call of `f`, written with Python literals, for example \
`'hello', [1, 2, 3]` for `f('hello', [1, 2, 3])`.

### Answer format
Inside <answer> </answer>, write the program in a ```python block and the input in an ```input block:
<answer>
```python
def f(...):
    ...
```
```input
...
```
</answer>

### Reference tasks
{references}"""

_GOALS = {
    CODE_O: "predict its output from an input",
    CODE_I: "find an input that produces a given output",
}

_TEACHER_F = """\
## Task: propose inputs and a message for a Python program
Here is a program `f`. Propose {n_inputs} different inputs for it whose outputs together reveal what \
`f` does, and a short message that hints at its behaviour without giving the code. A student will see \
{n_shown} of the input/output pairs and your message, and must write the program.

```python
{program}
```

### Input requirements
- Each input is the argument list of one call of `f`, written with Python literals, for example \
`'hello', [1, 2, 3]`. The {n_inputs} inputs must be different from each other.

### Answer format
Inside <answer> </answer>, write each input in its own ```input block and the message in a ```message \
block:
<answer>
```input
...
```
(one block per input)
```message
...
```
</answer>{references}"""

_STUDENT_O = """\
## Task: deduce the output of a Python program
Given the program and the input below, predict the value returned by `f` for that input.

```python
{program}
```

```input
{input}
```

Write the returned value as a Python literal (as repr() prints it) in an ```output block inside \
<answer> </answer>, for example:
<answer>
```output
[1, 'a']
```
</answer>"""

_STUDENT_I = """\
## Task: find an input of a Python program
Given the program and the output below, find an input such that `f` returns that output. Any input \
that produces it is correct.

```python
{program}
```

```output
{output}
```

Write the argument list of the call as Python literals in an ```input block inside <answer> </answer>, \
for example for `f('a', [1, 2])`:
<answer>
```input
'a', [1, 2]
```
</answer>"""

_STUDENT_F = """\
## Task: write the Python program from examples
Write a function `f` that maps each input below to its output (inputs are argument lists of `f`). It \
will be tested on other inputs too. Hint from the task author: {message}

{pairs}

Helpers and classes are allowed; the entry function must be named `f`. Write the program in a \
```python block inside <answer> </answer>:
<answer>
```python
def f(...):
    ...
```
</answer>"""


def _fence(kind: str, body: str) -> str:
    return f"```{kind}\n{body}\n```"


def format_reference(task: Task) -> str:
    """One buffer task as a teacher sees it: program, input and output."""
    return "\n".join(
        [_fence("python", task.program), _fence("input", task.input), _fence("output", task.output)]
    )


def format_code_f_reference(task: Task, max_inputs: int = 3) -> str:
    """One earlier induction task as a teacher sees it: a few of its inputs and its message."""
    parts = [_fence("input", i) for i in task.inputs[:max_inputs]]
    parts.append(_fence("message", task.message))
    return "\n".join(parts)


def teacher_prompt(
    task_type: str,
    references: Sequence[Task],
    program: str | None = None,
    n_inputs: int = 10,
    n_shown: int = 5,
    allowed_modules: Sequence[str] = DEFAULT_ALLOWED_MODULES,
    max_output_chars: int = 1000,
) -> str:
    """The teacher's question for a task type (unwrapped; see ``format_r1``/``format_chat``).

    ``references`` are the K tasks sampled from the buffer of this type; for ``code_f``, ``program``
    is the buffer program whose inputs are to be proposed.
    """
    if task_type in (CODE_O, CODE_I):
        rules = _CODE_RULES.format(modules=", ".join(allowed_modules), max_output_chars=max_output_chars)
        refs = "\n\n".join(f"#### Reference {i + 1}\n{format_reference(t)}" for i, t in enumerate(references))
        return _TEACHER_IO.format(goal=_GOALS[task_type], rules=rules, references=refs or "(none yet)")
    if task_type == CODE_F:
        if not program:
            raise ValueError("teacher_prompt: code_f needs the program to propose inputs for")
        refs = "\n\n".join(
            f"#### Example {i + 1}\n{format_code_f_reference(t)}" for i, t in enumerate(references)
        )
        refs = f"\n\n### Examples of inputs and messages for other programs\n{refs}" if refs else ""
        return _TEACHER_F.format(n_inputs=n_inputs, n_shown=n_shown, program=program, references=refs)
    raise ValueError(f"unknown task type {task_type!r}")


def student_prompt(task: Task) -> str:
    """The student's question for one task (unwrapped)."""
    if task.type == CODE_O:
        return _STUDENT_O.format(program=task.program, input=task.input)
    if task.type == CODE_I:
        return _STUDENT_I.format(program=task.program, output=task.output)
    if task.type == CODE_F:
        pairs = "\n\n".join(_fence("input", i) + "\n" + _fence("output", o) for i, o in task.shown_pairs)
        return _STUDENT_F.format(message=task.message, pairs=pairs)
    raise ValueError(f"unknown task type {task.type!r}")


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


# Answer prefills for small models (``tasks.answer_prefill``): appended after the wrapper's
# ``<think>``, they skip the reasoning and open the answer block, so that the model only has to
# continue the code or value. None of them ends in whitespace (see ``check_prompt_ending``).
TEACHER_PREFILL = {
    CODE_O: "</think>\n<answer>\n```python\ndef f(",
    CODE_I: "</think>\n<answer>\n```python\ndef f(",
    CODE_F: "</think>\n<answer>\n```input",
}
STUDENT_PREFILL = {
    CODE_O: "</think>\n<answer>\n```output",
    CODE_I: "</think>\n<answer>\n```input",
    CODE_F: "</think>\n<answer>\n```python\ndef f(",
}
