"""Parsing completions: last <answer> block, fenced blocks, format failures never raise."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from populora.tasks.blocks import answer_field, extract_answer
from populora.tasks.config import TaskEnv
from populora.tasks.parsing import parse_proposal, parse_student_answer
from populora.tasks.records import CODE_F, CODE_I, CODE_O, FORMAT

ENV = TaskEnv(require_think=False)  # answers in <answer> tags, no reasoning required
LENIENT = ENV.replace(require_answer_tag=False)  # small models: completions without tags read whole
THINK = ENV.replace(require_think=True)  # AZR's format check, the run default
FENCE = ENV.replace(require_fence=True)

GOOD_TEACHER = """Let me design something.
</think>
<answer>
```python
def helper(x):
    return x * 2

def f(a, b):
    return helper(a) + b
```
```input
3, 4
```
</answer>"""


def test_teacher_code_o():
    p = parse_proposal(GOOD_TEACHER, CODE_O, ENV, teacher_id="t1", step=7)
    assert p.reason is None
    assert p.program.startswith("def helper(x):") and p.program.endswith("return helper(a) + b")
    assert p.inputs == ("3, 4",)
    assert (p.teacher_id, p.step, p.type) == ("t1", 7, CODE_O)


def test_last_answer_block_wins():
    text = (
        "<think>draft: <answer>```python\ndef f(x):\n    return 0\n```\n```input\n1\n```</answer> no wait</think>"
        "<answer>```python\ndef f(x):\n    return 1\n```\n```input\n2\n```</answer>"
    )
    p = parse_proposal(text, CODE_I, ENV)
    assert p.program == "def f(x):\n    return 1"
    assert p.inputs == ("2",)


def test_last_fence_of_kind_wins():
    text = "<answer>```python\ndef f(x):\n    return 0\n```\n```input\n1\n```\n```input\n5\n```\n```python\ndef f(x):\n    return 9\n```</answer>"
    p = parse_proposal(text, CODE_O, ENV)
    assert p.program == "def f(x):\n    return 9"
    assert p.inputs == ("5",)


def test_nested_answer_tags():
    assert extract_answer("<answer>outer <answer>inner</answer></answer>") == "inner"
    s = parse_student_answer("<answer>junk<answer>```output\n[1, 2]\n```</answer></answer>", CODE_O, ENV)
    assert s.format_ok and s.answer == "[1, 2]"


def test_unclosed_or_missing_tags_are_format_failures():
    assert extract_answer("<answer>```output\n1\n```") is None
    assert extract_answer("no tags at all") is None
    for text in ["<answer>```output\n1\n```", "```output\n1\n```", "", "</answer><answer>"]:
        s = parse_student_answer(text, CODE_O, ENV)
        assert (s.format_ok, s.answer, s.reason) == (False, None, FORMAT)
    assert parse_proposal("<answer>```python\ndef f(x):\n  return x\n```", CODE_O, ENV).reason == FORMAT


def test_missing_fences():
    # a student answer without any fence: the bare payload is taken (unless fences are required)
    assert parse_student_answer("<answer> [1, 2] </answer>", CODE_O, ENV).answer == "[1, 2]"
    assert parse_student_answer("<answer> [1, 2] </answer>", CODE_O, FENCE).reason == FORMAT
    # an unlabelled fence is accepted when no block of the expected kind is present
    assert parse_student_answer("<answer>```\n'a', 2\n```</answer>", CODE_I, ENV).answer == "'a', 2"
    # only blocks of another kind: format failure
    assert parse_student_answer("<answer>```python\n1\n```</answer>", CODE_O, ENV).reason == FORMAT
    # teacher: a program without an input block is a format failure
    assert parse_proposal("<answer>```python\ndef f(x):\n    return x\n```</answer>", CODE_O, ENV).reason == FORMAT
    assert parse_proposal("<answer>def f(x): return x</answer>", CODE_O, ENV).reason == FORMAT


def test_student_answer_grammar():
    assert parse_student_answer("<answer>```output\n{'a': (1, 2.5)}\n```</answer>", CODE_O, ENV).format_ok
    assert parse_student_answer("<answer>```output\nf(1)\n```</answer>", CODE_O, ENV).reason == FORMAT
    assert parse_student_answer("<answer>```input\n'abc', [1]\n```</answer>", CODE_I, ENV).answer == "'abc', [1]"
    assert parse_student_answer("<answer>```input\nx=1\n```</answer>", CODE_I, ENV).reason == FORMAT
    assert parse_student_answer("<answer>```input\n\n```</answer>", CODE_I, ENV).reason == FORMAT
    prog = parse_student_answer("<answer>```python\n    def f(x):\n        return x\n```</answer>", CODE_F, ENV)
    assert prog.format_ok and prog.answer == "def f(x):\n    return x"  # dedented
    assert parse_student_answer("<answer>```python\ndef f(:\n```</answer>", CODE_F, ENV).reason == FORMAT


def test_code_f_proposal():
    inputs = "".join(f"```input\n{i}, 'x'\n```\n" for i in range(10))
    text = f"<think>ok</think><answer>{inputs}```message\nRepeats the string.\n```</answer>"
    p = parse_proposal(text, CODE_F, ENV, program="def f(n, s):\n    return s * n")
    assert p.reason is None
    assert len(p.inputs) == 10 and p.inputs[3] == "3, 'x'"
    assert p.message == "Repeats the string."
    assert p.program == "def f(n, s):\n    return s * n"
    no_msg = parse_proposal(f"<answer>{inputs}</answer>", CODE_F, ENV, program="def f(n, s):\n    return s")
    assert no_msg.reason == FORMAT


def test_answer_field_kind_labels_case_insensitive():
    assert answer_field("<answer>```Output\n3\n```</answer>", "output") == "3"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("<>/answerthikpyo`\n ()[]'\"0123456789,:def")), max_size=200))
def test_fuzz_tag_soup_never_raises(text):
    for t in (CODE_O, CODE_I, CODE_F):
        s = parse_student_answer(text, t, ENV)
        assert s.format_ok == (s.answer is not None)
    parse_proposal(text, CODE_O, ENV)
    parse_proposal(text, CODE_F, ENV, program="def f(x):\n    return x")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_fuzz_arbitrary_text_never_raises(text):
    for t in (CODE_O, CODE_I, CODE_F):
        parse_student_answer(text, t, ENV)
        parse_student_answer(f"<answer>```output\n{text}\n```</answer>", t, ENV)
    parse_proposal(f"<answer>```python\n{text}\n```\n```input\n{text}\n```</answer>", CODE_I, ENV)


def test_answer_tag_can_be_optional_for_small_models():
    """SmolLM2-135M writes fenced blocks without <answer> tags; the lenient mode reads them."""
    from populora.tasks.parsing import parse_proposal, parse_student_answer

    text = "\n```python\ndef f(n):\n    return n * 2\n```\n```input\n21\n```"
    assert parse_proposal(text, "code_o", ENV).reason == "format"  # tags required by default
    p = parse_proposal(text, "code_o", LENIENT)
    assert p.reason is None and p.program == "def f(n):\n    return n * 2" and p.inputs == ("21",)
    # reasoning before </think> is not read as the answer
    s = "<think>maybe ```output\n1\n```</think>\n```output\n42\n```"
    assert parse_student_answer(s, "code_o", LENIENT).answer == "42"
    # an <answer> block still wins when present
    s2 = "```output\n1\n```<answer>```output\n2\n```</answer>"
    assert parse_student_answer(s2, "code_o", LENIENT).answer == "2"
    assert parse_student_answer("no blocks at all", "code_i", LENIENT).format_ok is False


def test_azr_think_format_check_when_required():
    from populora.tasks.parsing import parse_proposal as parse

    answer = "<answer>\n```output\n[1, 2]\n```\n</answer>"
    assert parse_student_answer(answer, CODE_O, ENV).format_ok  # off in this environment
    assert not parse_student_answer(answer, CODE_O, THINK).format_ok  # never closed </think>
    assert parse_student_answer("reasoning</think> " + answer, CODE_O, THINK).format_ok
    assert not parse_student_answer("a</think> b " + answer, CODE_O, THINK).format_ok  # text between
    teacher = "plan</think>\n<answer>\n```python\ndef f(x):\n    return x\n```\n```input\n1\n```\n</answer>"
    assert parse(teacher, CODE_O, THINK).reason is None
    assert parse(teacher.replace("</think>", ""), CODE_O, THINK).reason == FORMAT
