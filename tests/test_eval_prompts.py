"""Prompt templates (base / chat / r1) for each benchmark family, with the tiny model's ChatML tokenizer."""

from __future__ import annotations

import pytest

from eval.benchmarks import Item
from eval.benchmarks.prompts import MATH_INSTRUCTION, TEMPLATES, build_prompt, prompt_opens_fence

CODE = Item("humaneval_plus", "HumanEval/0", 'def f(x):\n    """Return x."""\n', None, {"entry_point": "f"})
MATH = Item("gsm8k", "0", "What is 1 + 1?", "2")
LCB_STDIN = Item("livecodebench", "toy001", "Print A + B.", None, {"starter_code": "", "tests": []})
LCB_FN = Item("livecodebench", "toy002", "Return the sum.", None,
              {"starter_code": "class Solution:\n    def s(self, a):\n        ", "tests": [], "func_name": "s"})


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from populora.policy.models import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model("tiny"))


@pytest.mark.parametrize("template", TEMPLATES)
def test_code_prompts_never_end_in_whitespace(template, tokenizer):
    for item in (CODE, LCB_STDIN, LCB_FN):
        p = build_prompt(item, template, tokenizer)
        if template == "chat" and item.benchmark == "livecodebench":
            # LCB's chat prompt is not prefilled: it ends with the template's generation prompt
            assert p.endswith("<|im_start|>assistant\n") and "```python\n# YOUR CODE HERE" in p or "class Solution" in p
            continue
        assert p == p.rstrip(), (template, item.item_id, p[-30:])


def test_templates(tokenizer):
    assert build_prompt(CODE, "base") == CODE.question.rstrip()  # EvalPlus base-model completion
    assert build_prompt(MATH, "base") == f"Question: What is 1 + 1?\n{MATH_INSTRUCTION}\nAnswer:"
    chat = build_prompt(CODE, "chat", tokenizer)
    assert "<|im_start|>user" in chat and "Please provide a self-contained Python script" in chat
    assert prompt_opens_fence(chat)
    r1 = build_prompt(MATH, "r1")
    assert r1.endswith("<think>") and "What is 1 + 1?" in r1 and "\\boxed{}" in r1
    lcb = build_prompt(LCB_FN, "chat", tokenizer)
    assert "You will use the following starter code" in lcb and "class Solution" in lcb
    assert "Read the inputs from stdin" in build_prompt(LCB_STDIN, "base")
    with pytest.raises(ValueError, match="chat template"):
        build_prompt(MATH, "chat", None)
    with pytest.raises(ValueError, match="--template"):
        build_prompt(MATH, "fancy")


def test_stop_strings_per_template_and_benchmark(tokenizer):
    from eval.benchmarks.prompts import end_of_turn, stop_strings

    assert end_of_turn(tokenizer) == "<|im_end|>"  # read from the chat template itself
    assert "\nQuestion:" in stop_strings("gsm8k", "base")
    assert "<|im_end|>" in stop_strings("gsm8k", "chat", tokenizer)
    assert stop_strings("aime24", "r1") == ("</answer>", "\nUser:")
    assert "\ndef " in stop_strings("humaneval_plus", "base") and "\nassert" in stop_strings("mbpp_plus", "base")
    assert "\n```" in stop_strings("humaneval_plus", "chat", tokenizer)
    assert stop_strings("livecodebench", "base") == ("\n```",)
    assert "<|im_end|>" in stop_strings("livecodebench", "chat", tokenizer)


def test_a_run_on_completion_is_cut_at_the_first_answer(tokenizer):
    """On `tiny`, with a scripted completion that runs on past its answer into an invented question:
    the stop strings end it at the first answer, and the scorer reads that answer."""
    from eval.benchmarks import BENCHMARKS
    from eval.benchmarks.families import family_of
    from eval.benchmarks.math_answers import is_correct
    from eval.benchmarks.prompts import stop_strings
    from populora.policy.sampling import find_stop

    run_on = " 1 + 1 = 2, so the answer is $\\boxed{2}$.\nQuestion: What is 2 + 2?\nAnswer: It is $\\boxed{5}$."
    cut = find_stop(run_on, stop_strings("gsm8k", "base"))
    record = {"prompt": build_prompt(MATH, "base"), "completion": run_on[:cut], "template": "base", "finish_reason": "stop"}
    answer = family_of(BENCHMARKS["gsm8k"]).answer(MATH, record)
    assert is_correct(answer, "2") and not is_correct(run_on, "2")  # unstopped, the invented answer is scored

    r1 = "<think>easy</think> <answer>\\boxed{2}</answer>\nUser: next? Assistant: <answer>\\boxed{7}</answer>"
    cut = find_stop(r1, stop_strings("gsm8k", "r1"))
    rec = {"prompt": build_prompt(MATH, "r1"), "completion": r1[:cut], "template": "r1", "finish_reason": "stop"}
    assert is_correct(family_of(BENCHMARKS["gsm8k"]).answer(MATH, rec), "2")
