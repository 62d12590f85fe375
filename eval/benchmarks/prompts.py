"""Prompt templates (``base``, ``chat``, ``r1``), their stop strings, and the template-level pieces
of answer extraction. Benchmark-specific prompt text lives with each benchmark family (``eval.benchmarks.families``);
``build_prompt`` and ``stop_strings`` dispatch to it.

- ``base`` (completion models): EvalPlus items are continued directly from the function signature
  and docstring, as EvalPlus does for base models; math items get a ``Question: ... Answer:`` frame
  asking for a ``\\boxed{}`` answer; LiveCodeBench gets its question/format/answer sections as text
  and an opened code block.
- ``chat`` (instruction models): the tokenizer's chat template around EvalPlus's instruction
  (response prefilled with EvalPlus's response prefix and an opened ```python fence), Qwen2.5-Math's
  chain-of-thought instruction for math, and LiveCodeBench's own system message and question
  template (not prefilled: LCB's chat models open their own block).
- ``r1``: the R1 wrapper AZR trains with (``populora.tasks.prompts.format_r1``: think inside
  ``<think>``, answer inside ``<answer>``). AZR's own evaluation scripts used this style, so ``r1``
  is the one to use for numbers comparable with AZR-trained adapters.

Stop strings (why: without them a base model runs on into invented new questions and a chat
template on a base model runs past its end-of-turn marker, and the scorers, which read the last
answer, would score an invented one): ``chat`` stops at the template's end-of-turn marker (read from
the chat template itself) and the tokenizer's EOS text; ``r1`` at ``</answer>`` and a new ``User:``
turn; ``base`` per benchmark family (EvalPlus's own stop lists, ``\\nQuestion:`` for math, the closing
fence for LiveCodeBench).

Prompts never end in whitespace before code: with byte-level BPE tokenizers a prompt ending in
``"```python\\n"`` drops valid-code rates to near zero, so fences are left open without the newline.
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
R1_STOPS = ("</answer>", "\nUser:")  # the answer is closed, or the model starts a new turn


def check_template(template: str) -> None:
    if template not in TEMPLATES:
        raise ValueError(f"--template must be one of {', '.join(TEMPLATES)}, got {template!r}")


def chat_prompt(messages: list[dict], tokenizer) -> str:
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise ValueError("--template chat needs a tokenizer with a chat template (use --template base or r1)")
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def r1_prompt(instruction: str) -> str:
    from populora.tasks.prompts import format_r1

    return format_r1(instruction)


def end_of_turn(tokenizer) -> str | None:
    """The text that closes an assistant turn in the tokenizer's chat template (``<|im_end|>``).

    Read from the template itself: an assistant message ``M`` is rendered and whatever follows ``M``
    up to the first whitespace is the marker. None without a chat template or a marker.
    """
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return None
    probe = "PopuLoRAEndOfTurnProbe"
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "x"}, {"role": "assistant", "content": probe}],
                                             tokenize=False)
    except Exception:  # a template that refuses this conversation: no marker known
        return None
    tail = text[text.rfind(probe) + len(probe):].strip() if probe in text else ""
    return tail.split()[0] if tail else None


def template_stops(template: str, tokenizer=None) -> tuple[str, ...]:
    """Stop strings every benchmark uses under ``template`` (families add their own for ``base``)."""
    if template == "r1":
        return R1_STOPS
    if template == "chat":
        stops = [end_of_turn(tokenizer), getattr(tokenizer, "eos_token", None)]
        return tuple(dict.fromkeys(s for s in stops if isinstance(s, str) and s))
    return ()


def stop_token_ids(template: str, tokenizer=None) -> tuple[int, ...]:
    """Token ids of the chat end-of-turn marker, for engines that stop on ids.

    Engines detokenize with special tokens skipped, so a marker that is a special token of a base
    model (``<|im_end|>`` of Qwen2.5 base, whose EOS is ``<|endoftext|>``) never appears in the
    text and a stop *string* cannot catch it; a stop token id does.
    """
    marker = end_of_turn(tokenizer) if template == "chat" else None
    if marker is None:
        return ()
    ids = tokenizer(marker, add_special_tokens=False)["input_ids"]
    return tuple(ids) if len(ids) == 1 else ()


def wrap_math(instruction: str, template: str, tokenizer=None) -> str:
    """A math instruction in a template; shared with the lm-eval model."""
    check_template(template)
    if template == "base":
        return f"Question: {instruction}\nAnswer:"
    if template == "r1":
        return r1_prompt(instruction)
    return chat_prompt([{"role": "user", "content": instruction}], tokenizer)


def build_prompt(item: Item, template: str, tokenizer=None) -> str:
    """The prompt text for ``item`` under ``template`` (``chat`` needs the tokenizer's chat template)."""
    from eval.benchmarks.families import family_of

    check_template(template)
    return family_of(BENCHMARKS[item.benchmark]).prompt(item, template, tokenizer)


def stop_strings(benchmark: str, template: str, tokenizer=None) -> tuple[str, ...]:
    from eval.benchmarks.families import family_of

    check_template(template)
    spec = BENCHMARKS[benchmark]
    return tuple(family_of(spec).stop(spec, template, tokenizer))


_ANSWER = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.S)


def answer_block(completion: str, template: str) -> str:
    """Under ``r1``: the content of the last ``<answer>`` block (the whole text when there is none)."""
    if template == "r1":
        answers = _ANSWER.findall(completion)
        if answers:
            return answers[-1]
    return completion


def prompt_opens_fence(prompt: str) -> bool:
    return prompt.endswith("```python")
