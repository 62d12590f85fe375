"""Our own short prompt templates (``tasks.templates: compact``), for small models.

AZR's templates (``azr_templates.py``, the default) are long (a page of instructions before the
references); a 135M model on a CPU reads them slowly and follows them badly. These say the same
things in fewer tokens: the code rules, the answer format, the references. docs/tasks.md lists how
they differ from AZR's.
"""

from __future__ import annotations

from collections.abc import Sequence

from populora.tasks.records import Task

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

_STUDENT_E = """\
## Task: predict the error of a Python program
Given the program and the input below, name the exception type `f` raises for that input (for \
example `ValueError`), or write `NoError` if it returns normally.

```python
{program}
```

```input
{input}
```

Write the type name in an ```output block inside <answer> </answer>, for example:
<answer>
```output
KeyError
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


def format_reference(task: Task, output_block: str = "output") -> str:
    """One buffer task as a teacher sees it: program, input and output."""
    return "\n".join(
        [_fence("python", task.program), _fence("input", task.input), _fence(output_block, task.output)]
    )


def format_code_f_reference(task: Task, max_inputs: int = 3) -> str:
    """One earlier induction task as a teacher sees it: a few of its inputs and its message."""
    parts = [_fence("input", i) for i in task.inputs[:max_inputs]]
    parts.append(_fence("message", task.message))
    return "\n".join(parts)


def teacher_program_and_input(goal: str, references: Sequence[Task], allowed_modules: Sequence[str],
                              max_output_chars: int, output_block: str = "output") -> str:
    """A teacher who writes a new program and one input (code_o, code_i, code_e), with K references,
    told which modules it may import and how long an output may be."""
    rules = _CODE_RULES.format(modules=", ".join(allowed_modules), max_output_chars=max_output_chars)
    refs = "\n\n".join(f"#### Reference {i + 1}\n{format_reference(t, output_block)}" for i, t in enumerate(references))
    return _TEACHER_IO.format(goal=goal, rules=rules, references=refs or "(none yet)")


def teacher_induction(program: str, references: Sequence[Task], n_inputs: int, n_shown: int) -> str:
    """A code_f teacher: ``n_inputs`` inputs (``n_shown`` of them shown to the student) and a message for
    ``program``, with earlier induction tasks as examples."""
    refs = "\n\n".join(f"#### Example {i + 1}\n{format_code_f_reference(t)}" for i, t in enumerate(references))
    refs = f"\n\n### Examples of inputs and messages for other programs\n{refs}" if refs else ""
    return _TEACHER_F.format(n_inputs=n_inputs, n_shown=n_shown, program=program, references=refs)


def student_deduction(task: Task) -> str:
    return _STUDENT_O.format(program=task.program, input=task.input)


def student_abduction(task: Task) -> str:
    return _STUDENT_I.format(program=task.program, output=task.output)


def student_error(task: Task) -> str:
    return _STUDENT_E.format(program=task.program, input=task.input)


def student_induction(task: Task) -> str:
    pairs = "\n\n".join(_fence("input", i) + "\n" + _fence("output", o) for i, o in task.shown_pairs)
    return _STUDENT_F.format(message=task.message, pairs=pairs)
