"""Prompt templates for the evaluation: ``base``, ``chat`` and ``r1``, per benchmark kind.

- ``base`` (completion models): EvalPlus items are continued directly from the function signature
  and docstring, as EvalPlus does for base models; math items get a ``Question: ... Answer:`` frame
  asking for a ``\\boxed{}`` answer; LiveCodeBench gets its question/format/answer sections as text.
- ``chat`` (instruction models): the tokenizer's chat template around EvalPlus's instruction
  ("Please provide a self-contained Python script ...", response prefilled with EvalPlus's response
  prefix and an opened ```python fence), Qwen2.5-Math's chain-of-thought instruction for math
  ("Please reason step by step, and put your final answer within \\boxed{}."), and LiveCodeBench's
  own system message and format instructions.
- ``r1``: the R1 wrapper AZR trains with (``populora.tasks.prompts.format_r1``: think inside
  ``<think>``, answer inside ``<answer>``). AZR's own evaluation scripts used this style (their
  ``azr`` template for math; an AZR model style in their LiveCodeBench fork), so ``r1`` is the one to
  use for numbers comparable with AZR-trained adapters.

Prompts never end in whitespace before code: with byte-level BPE tokenizers a prompt ending in
``"```python\\n"`` drops valid-code rates to near zero, so fences are left open without the newline
and EvalPlus prompts are right-stripped (``solution_source`` re-joins them).
"""

from __future__ import annotations

import re

from eval.benchmarks import BENCHMARKS, Item

TEMPLATES = ("base", "chat", "r1")

EVALPLUS_INSTRUCTION = (
    "Please provide a self-contained Python script that solves the following problem in a markdown code block:"
)
EVALPLUS_RESPONSE = "Below is a Python script with a self-contained function that solves the problem and passes corresponding tests:"
MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
LCB_SYSTEM = (
    "You are an expert Python programmer. You will be given a question (problem specification) and will generate "
    "a correct Python program that matches the specification and passes all tests."
)
LCB_WITH_STARTER = (
    "You will use the following starter code to write the solution to the problem and enclose your code within delimiters."
)
LCB_STDIN = (
    "Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test on the sample "
    "inputs). Enclose your code within delimiters as follows. Ensure that when the python program runs, it reads the "
    "inputs, runs the algorithm and writes output to STDOUT."
)


def question_text(item: Item) -> str:
    """The instruction for ``chat`` and ``r1`` templates (the task, its format, the answer form)."""
    kind = BENCHMARKS[item.benchmark].kind
    if item.benchmark == "livecodebench":
        starter = item.meta.get("starter_code") or ""
        if starter.strip():
            fmt = f"### Format: {LCB_WITH_STARTER}\n```python\n{starter}\n```"
        else:
            fmt = f"### Format: {LCB_STDIN}\n```python\n# YOUR CODE HERE\n```"
        return f"### Question:\n{item.question}\n\n{fmt}\n\n### Answer: (use the provided format with backticks)"
    if kind == "code":
        return f"{EVALPLUS_INSTRUCTION}\n```\n{item.question.strip()}\n```"
    return f"{item.question.strip()}\n{MATH_INSTRUCTION}"


def wrap_math(instruction: str, template: str, tokenizer=None) -> str:
    """A math instruction (``question_text``) in a template; shared with the lm-eval model."""
    if template == "base":
        return f"Question: {instruction}\nAnswer:"
    if template == "r1":
        from populora.tasks.prompts import format_r1

        return format_r1(instruction)
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise ValueError("--template chat needs a tokenizer with a chat template (use --template base or r1)")
    return tokenizer.apply_chat_template([{"role": "user", "content": instruction}], tokenize=False, add_generation_prompt=True)


def build_prompt(item: Item, template: str, tokenizer=None) -> str:
    """The prompt text for ``item`` under ``template`` (``chat`` needs the tokenizer's chat template)."""
    if template not in TEMPLATES:
        raise ValueError(f"--template must be one of {', '.join(TEMPLATES)}, got {template!r}")
    kind = BENCHMARKS[item.benchmark].kind
    if template == "base":
        if kind == "code" and item.benchmark != "livecodebench":
            return item.question.rstrip()
        if kind == "math":
            return wrap_math(question_text(item), template, tokenizer)
        return f"{LCB_SYSTEM}\n\n{question_text(item)}\n\n```python"
    if template == "r1":
        from populora.tasks.prompts import format_r1

        return format_r1(question_text(item))
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise ValueError("--template chat needs a tokenizer with a chat template (use --template base or r1)")
    messages = [{"role": "user", "content": question_text(item)}]
    if item.benchmark == "livecodebench":
        messages.insert(0, {"role": "system", "content": LCB_SYSTEM})
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    if kind == "code":
        prefix = EVALPLUS_RESPONSE + "\n" if item.benchmark != "livecodebench" else ""
        return text + prefix + "```python"
    return text


_FENCE = re.compile(r"```(?:python|py|Python)?[ \t]*\n(.*?)(?:```|$)", re.S)
_ANSWER = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.S)


def extract_code(completion: str, template: str, prompt_opened_fence: bool) -> str:
    """The program in a completion: last ``<answer>`` block (r1), then the last fenced block.

    ``prompt_opened_fence``: the prompt ended in an open ```` ```python ```` fence, so the
    completion starts inside a code block and ends at the first closing fence.
    """
    text = completion
    if template == "r1":
        answers = _ANSWER.findall(text)
        if answers:
            text = answers[-1]
    if prompt_opened_fence and template != "r1":
        return text.split("```")[0].strip("\n")
    blocks = _FENCE.findall(text)
    return blocks[-1].strip("\n") if blocks else text.strip("\n")


def prompt_opens_fence(prompt: str) -> bool:
    return prompt.endswith("```python")


def solution_source(item: Item, prompt: str, completion: str, template: str) -> str:
    """The full candidate program for a code item (before EvalPlus's sanitizer)."""
    if template == "base" and item.benchmark != "livecodebench":
        return prompt + completion  # completion continues the function body
    return extract_code(completion, template, prompt_opens_fence(prompt))
