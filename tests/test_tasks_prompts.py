"""Prompt templates: content, K references, R1/chat wrappers, and the trailing-newline pitfall."""

from __future__ import annotations

import pytest

from populora.tasks.config import TaskEnv
from populora.tasks.kinds import all_kinds
from populora.tasks.parsing import parse_proposal, parse_student_answer
from populora.tasks.prompts import (
    check_prompt_ending,
    format_chat,
    format_r1,
    student_prompt,
    teacher_prompt,
)
from populora.tasks.records import CODE_F, CODE_I, CODE_O, Task

COMPACT = TaskEnv(templates="compact")
AZR = TaskEnv(templates="azr")
ENV = TaskEnv(require_think=False)  # answers in <answer> tags, no reasoning required
LENIENT = ENV.replace(require_answer_tag=False)  # small models: completions without tags read whole
PREFILLED = TaskEnv(answer_prefill=True)
E_TASK = Task(id="e", type="code_e", program="def f(d):\n    return d['k']", input="{}", output="KeyError")

REF = Task(
    id="r1", type=CODE_O, program="def f(a):\n    return a", input="'Hello world'", output="'Hello world'"
)
REFS = [
    Task(id=f"r{i}", type=CODE_O, program=f"def f(x):\n    return x + {i}", input=str(i), output=str(2 * i))
    for i in range(6)
]
F_TASK = Task(
    id="cf",
    type=CODE_F,
    program="def f(n):\n    return n * n",
    inputs=tuple(str(i) for i in range(10)),
    outputs=tuple(str(i * i) for i in range(10)),
    message="Squares the number.",
)


def _chat_tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel({"[UNK]": 0}, unk_token="[UNK]")))
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    return tok


def all_questions():
    azr = [q for k in all_kinds().values() for q in (
        k.teacher_question(REFS if not k.given_program else [], REF.program, AZR),
        k.student_question(F_TASK if k.given_program else (E_TASK if k.name == "code_e" else REF), AZR))]
    return azr + [
        teacher_prompt(CODE_O, REFS, env=COMPACT),
        teacher_prompt(CODE_I, REFS, env=COMPACT),
        teacher_prompt(CODE_O, [], env=COMPACT),
        teacher_prompt(CODE_F, [F_TASK], program=REF.program, env=COMPACT),
        teacher_prompt(CODE_F, [], program=REF.program, env=COMPACT),
        student_prompt(REF, COMPACT),
        student_prompt(Task(id="i", type=CODE_I, program=REF.program, input="3", output="3"), COMPACT),
        student_prompt(F_TASK, COMPACT),
    ]


def test_teacher_prompts_show_k_references():
    q = teacher_prompt(CODE_O, REFS, env=COMPACT)
    assert all(t.program in q for t in REFS)
    assert q.count("#### Reference") == 6
    assert "```python" in q and "```input" in q and "<answer>" in q
    assert "predict its output" in q
    assert "find an input" in teacher_prompt(CODE_I, REFS[:2], env=COMPACT)
    assert teacher_prompt(CODE_I, REFS[:2], env=COMPACT).count("#### Reference") == 2
    assert "(none yet)" in teacher_prompt(CODE_O, [], env=COMPACT)
    # the import rule is the safety check's allowlist
    assert "collections" in q and "random" not in q.split("Allowed imports:")[1].split(".")[0]


def test_code_f_teacher_prompt():
    q = teacher_prompt(CODE_F, [F_TASK], program="def f(s):\n    return s[::-1]", env=COMPACT)
    assert "def f(s):\n    return s[::-1]" in q
    assert "10 different inputs" in q and "```message" in q
    assert "Squares the number." in q
    with pytest.raises(ValueError, match="program"):
        teacher_prompt(CODE_F, [], env=COMPACT)


def test_student_prompts():
    q = student_prompt(REF, COMPACT)
    assert REF.program in q and REF.input in q and "```output" in q
    assert REF.output not in q.replace(REF.input, "")  # code_o must not reveal the gold output
    qi = student_prompt(Task(id="i", type=CODE_I, program=REF.program, input="'secret'", output="'shown'"), COMPACT)
    assert "'shown'" in qi and "'secret'" not in qi
    qf = student_prompt(F_TASK, COMPACT)
    assert "Squares the number." in qf and "def f(n):\n    return n * n" not in qf
    for inp, out in F_TASK.shown_pairs:
        assert f"```input\n{inp}\n```\n```output\n{out}\n```" in qf
    for _inp, out in F_TASK.hidden_pairs:  # hidden pairs stay hidden
        assert f"```output\n{out}\n```" not in qf


def test_r1_wrapper():
    p = format_r1(student_prompt(REF, COMPACT))
    assert p.startswith("A conversation between User and Assistant.")
    assert "\nUser: ## Task: deduce" in p
    assert p.endswith("\nAssistant: <think>")


def test_chat_wrapper():
    p = format_chat(student_prompt(REF, COMPACT), _chat_tokenizer())
    assert p.endswith("<|im_start|>assistant\n<think>")
    assert "<think> </think> and <answer> </answer>" in p  # R1 instruction as system message
    assert "## Task: deduce" in p


def test_no_prompt_ends_in_bare_newline():
    tok = _chat_tokenizer()
    for q in all_questions():
        for p in (format_r1(q), format_r1(q + "\n"), format_chat(q + "\n\n", tok)):
            assert not p.endswith("\n") and not p[-1].isspace()
            assert p.endswith("<think>")
    with pytest.raises(ValueError, match="whitespace"):
        check_prompt_ending("```python\n")


def test_answer_formats_shown_in_prompts_parse():
    # the example answers in the templates follow the grammar the parser expects
    ok = "<answer>\n```python\ndef f(x):\n    return x\n```\n```input\n1\n```\n</answer>"
    assert parse_proposal(ok, CODE_O, ENV).reason is None
    assert parse_student_answer("<answer>\n```output\n[1, 'a']\n```\n</answer>", CODE_O, ENV).format_ok
    assert parse_student_answer("<answer>\n```input\n'a', [1, 2]\n```\n</answer>", CODE_I, ENV).format_ok


def test_answer_prefills_never_end_in_whitespace_and_parse_back():
    from populora.tasks.parsing import parse_proposal, parse_student_answer
    from populora.tasks.prompts import check_prompt_ending, format_r1, prefill

    for kind in all_kinds():
        for role in ("teacher", "student"):
            check_prompt_ending(format_r1("question") + prefill(role, kind, PREFILLED))
        assert prefill("teacher", kind, ENV) == prefill("student", kind, ENV) == ""  # only when asked for
    TEACHER_PREFILL = {k: prefill("teacher", k, PREFILLED) for k in all_kinds()}
    STUDENT_PREFILL = {k: prefill("student", k, PREFILLED) for k in all_kinds()}
    # the model continues the opened block; prefill + completion parses in lenient mode
    text = TEACHER_PREFILL["code_o"] + "x):\n    return x * 3\n```\n```input\n7\n```"
    p = parse_proposal(text, "code_o", LENIENT)
    assert p.reason is None and p.program == "def f(x):\n    return x * 3" and p.inputs == ("7",)
    s = parse_student_answer(STUDENT_PREFILL["code_o"] + "\n21\n```", "code_o", LENIENT)
    assert s.format_ok and s.answer == "21"
    # strict mode still requires a closed <answer> block
    assert parse_student_answer(STUDENT_PREFILL["code_o"] + "\n21\n```", "code_o", ENV).format_ok is False
