"""AZR's prompt templates: every placeholder filled, AZR's sections present, answers in AZR's format parse."""

from __future__ import annotations

import re

import pytest

from populora.tasks import azr_templates as T
from populora.tasks.config import TaskEnv
from populora.tasks.parsing import parse_proposal, parse_student_answer
from populora.tasks.prompts import check_prompt_ending
from populora.tasks.records import CODE_F, CODE_I, CODE_O, Task

ENV = TaskEnv()  # the run default: AZR's format check (</think> then <answer>)

REFS = [
    Task(id=f"r{i}", type=CODE_O, program=f"def f(x):\n    return {{'n': x + {i}}}", input=str(i), output=f"{{'n': {2 * i}}}")
    for i in range(6)
]
PROGRAM = "def f(s: str):\n    return s[::-1]"
PAIRS = [("'abc'", "'cba'"), ("'x'", "'x'"), ("''", "''")]

TEACHER = {
    "code_i": lambda: T.teacher_code_i(REFS),
    "code_o": lambda: T.teacher_code_o(REFS),
    "code_e": lambda: T.teacher_code_e(REFS, banned_assertion_keywords=["raise"]),
    "code_f": lambda: T.teacher_code_f(PROGRAM),
}
STUDENT = {
    "code_i": lambda: T.student_code_i(PROGRAM, "'cba'"),
    "code_o": lambda: T.student_code_o(PROGRAM, "'abc'"),
    "code_e": lambda: T.student_code_e(PROGRAM, "'abc'"),
    "code_f": lambda: T.student_code_f(PAIRS, "Reverse {it}"),
}
ALL = {**{f"teacher_{k}": v for k, v in TEACHER.items()}, **{f"student_{k}": v for k, v in STUDENT.items()}}

# str.format fields of the templates ({snippet}, {num_inputs}, ...) and AZR's <|...|> markers
FIELD = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*\}")
MARKERS = ("<|BANNED_KEYWORDS|>", "<|BANNED_ASSERTION_KEYWORDS|>")


@pytest.mark.parametrize("name", list(ALL))
def test_every_placeholder_is_filled(name):
    text = ALL[name]()
    assert not FIELD.search(text.replace("Reverse {it}", "")), FIELD.search(text)
    assert not any(m in text for m in MARKERS)
    assert "{{" not in text and "}}" not in text  # the templates' escaped braces are rendered single
    wrapped = T.format_r1(text)
    assert wrapped.startswith("A conversation between User and Assistant.") and wrapped.endswith("Assistant: <think>")
    assert check_prompt_ending(wrapped) == wrapped  # never a bare trailing newline before the model writes


@pytest.mark.parametrize("task_type", ["code_i", "code_o", "code_e"])
def test_proposer_prompt_has_azr_sections_and_k_references(task_type):
    text = TEACHER[task_type]()
    for section in ("### Code Requirements:", "### Input Requirements:", "### Formatting:", "### Example Format:",
                    "### Evaluation Criteria:", "### Reference Code Snippets:"):
        assert section in text
    assert "state tracking across multiple data transformations" in text  # AZR's state-tracking request
    assert "Creativity, the code needs to be sufficiently different from the provided reference snippets" in text
    assert ", ".join(T.AZR_BANNED_KEYWORDS) in text
    refs = text.split("### Reference Code Snippets:\n", 1)[1]
    output_kind = "error" if task_type == "code_e" else "output"
    for i, ref in enumerate(REFS):
        block = f"<snippet_{i}>\n```python\n{ref.program}\n```\n```input\n{ref.input}\n```\n```{output_kind}\n{ref.output}\n```\n</snippet_{i}>\n"
        assert block in refs
    assert "<snippet_6>" not in refs
    if task_type == "code_e":
        assert "error handling keywords are not allowed to be used in the code snippet: raise" in text
        assert "keywords are not allowed" not in T.teacher_code_e(REFS)  # AZR's config default: none


def test_code_f_proposer_sees_one_program_and_no_other_examples():
    text = T.teacher_code_f(PROGRAM, num_inputs=10)
    assert text.startswith("\n## Task: Output 10 Inputs that can be plugged into the following Code Snippet")
    assert text.endswith(f"### Code Snippet:\n```python\n{PROGRAM}\nf(<|YOUR INPUT WILL BE PLUGGED HERE|>)\n```\n")
    assert "Provide 10 valid inputs" in text and "wrapped in ```message``` tags" in text
    assert "<snippet_" not in text and text.count("```python") == 1
    with pytest.raises(ValueError, match="num_inputs must be >= 1"):
        T.teacher_code_f(PROGRAM, num_inputs=0)


def test_solver_prompts_show_the_task_in_azr_blocks():
    assert f"# Code Snippet:\n```python\n{PROGRAM}\n```\n\n# Output:\n```output\n'cba'\n```" in STUDENT["code_i"]()
    assert f"# Code Snippet:\n```python\n{PROGRAM}\n```\n\n# Input:\n```input\n'abc'\n```" in STUDENT["code_o"]()
    assert 'put "NoError" in the ```output``` tags' in STUDENT["code_e"]()
    text = STUDENT["code_f"]()
    assert "```input_0\n'abc'\n```\n```output_0\n'cba'\n```\n```input_1\n'x'\n```" in text
    assert "```input_2\n''\n```\n```output_2\n''\n```\n" in text and "input_3" not in text
    assert "# Message:\n```message\nReverse {it}\n```" in text
    assert text.rstrip().endswith("Name your entry function `f()`!!!")


def _answer(body: str) -> str:
    return f"I plan it.</think>\n<answer>\n{body}\n</answer>"


def test_answers_in_azr_format_parse_with_our_parser():
    teacher = _answer("```python\ndef f(name: str, info: dict):\n    return name\n```\n\n```input\n'John', {'age': 20, 'city': 'New York'}\n```")
    assert T.r1_format_ok(teacher)
    for tt in (CODE_I, CODE_O):
        p = parse_proposal(teacher, tt, ENV)
        assert p.reason is None and p.program.startswith("def f(name") and p.inputs == ("'John', {'age': 20, 'city': 'New York'}",)
    inputs = "\n".join(f"```input\n{i}\n```" for i in range(10))
    code_f = parse_proposal(_answer(f"{inputs}\n```message\nsquares\n```"), CODE_F, ENV, program=PROGRAM)
    assert code_f.reason is None and len(code_f.inputs) == 10 and code_f.message == "squares"
    assert parse_student_answer(_answer("```input\n'cba'\n```"), CODE_I, ENV).answer == "'cba'"
    assert parse_student_answer(_answer("```output\n{'age': 20}\n```"), CODE_O, ENV).answer == "{'age': 20}"
    assert parse_student_answer(_answer("```python\ndef f(a):\n    return a\n```"), CODE_F, ENV).answer == "def f(a):\n    return a"


def test_r1_format_check_is_azrs():
    assert T.r1_format_ok("reasoning </think> <answer> x </answer>")
    assert T.r1_format_ok("a</think>\n\n<answer>x</answer> trailing text is allowed")
    assert not T.r1_format_ok("reasoning <answer> x </answer>")  # </think> is required
    assert not T.r1_format_ok("reasoning </think> text <answer> x </answer>")  # only whitespace between
    assert not T.r1_format_ok("reasoning </think> <answer> x")  # unclosed answer
    assert T.r1_format_ok("<think>r</think><answer>x</answer>", think_in_prompt=False)
    assert not T.r1_format_ok("r</think><answer>x</answer>", think_in_prompt=False)


def test_provenance_is_recorded():
    assert re.fullmatch(r"[0-9a-f]{40}", T.AZR_COMMIT)
    assert "MIT License" in T.__doc__ and "LeapLab" in T.__doc__
    assert T.R1_WRAPPER.endswith("</answer>. User: {}\nAssistant: <think>")  # AZR: "User:" on the same line
