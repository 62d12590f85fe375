"""Prompt templates (base / chat / r1) for each benchmark kind, with the tiny model's ChatML tokenizer."""

from __future__ import annotations

import pytest

from eval.benchmarks import Item
from eval.prompts import MATH_INSTRUCTION, TEMPLATES, build_prompt, prompt_opens_fence

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
