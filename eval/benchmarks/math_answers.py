"""Answer equivalence for the math sets, with ``math-verify``.

The model is asked to put its final answer in ``\\boxed{}`` (every template in ``eval.benchmarks.prompts``
says so). ``math_verify.parse`` extracts the last boxed answer (falling back to the last LaTeX or
plain expression) and ``math_verify.verify`` decides equivalence symbolically: ``\\frac12`` =
``0.5`` = ``1/2``, intervals, tuples and sets, ``x = 3`` vs ``3``, and text units such as
``\\text{ cm}`` are handled by math-verify's normalisation rather than by string matching here.

Also here: the two self-check transforms used by the tests, ``gold_as_completion`` (the gold
answer written the way the prompt asks for it) and ``perturb_answer`` (a wrong answer).
"""

from __future__ import annotations

import re
from functools import lru_cache

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

from eval.benchmarks.families import BenchmarkFamily, ScoredAnswer

# Gold answers are LaTeX fragments without delimiters ("\\frac{1}{2}", "(1, 8, 19)") or plain
# numbers; wrapping them in $...$ makes math-verify read them as LaTeX.
_GOLD_CONFIG = (LatexExtractionConfig(), ExprExtractionConfig())
# math-verify gives up (answer judged wrong) after these many seconds per parse / comparison. Its
# default is 5 s; a few long answers (OlympiadBench solution sets) need more on a loaded machine.
PARSE_TIMEOUT_S = 20
VERIFY_TIMEOUT_S = 20


@lru_cache(maxsize=4096)
def parse_gold(gold: str):
    """math-verify's parsed form of a gold answer (cached: every adapter is scored against it)."""
    parsed = parse(f"${gold}$", extraction_config=_GOLD_CONFIG, parsing_timeout=PARSE_TIMEOUT_S)
    if not parsed:
        parsed = parse(gold, extraction_config=_GOLD_CONFIG, parsing_timeout=PARSE_TIMEOUT_S)
    return parsed


def extract_answer(completion: str) -> str | None:
    """The answer string math-verify reads from a completion (for display), or None."""
    parsed = parse(completion, parsing_timeout=PARSE_TIMEOUT_S)
    return parsed[1] if len(parsed) > 1 else None


def is_correct(completion: str, gold: str) -> bool:
    """True when the completion's final answer is mathematically equivalent to ``gold``."""
    gold_parsed = parse_gold(gold.strip())
    if not gold_parsed:
        # math-verify reads no value from a few gold strings (free text); then the last boxed
        # answer must equal the gold up to whitespace.
        from eval.benchmarks import last_boxed

        boxed = last_boxed(completion)
        return boxed is not None and _squash(boxed) == _squash(gold)
    pred = parse(completion, parsing_timeout=PARSE_TIMEOUT_S)
    if not pred:
        return False
    return bool(verify(gold_parsed, pred, timeout_seconds=VERIFY_TIMEOUT_S))


def _squash(s: str) -> str:
    return re.sub(r"\s+", "", s)


def gold_as_completion(gold: str) -> str:
    """The gold answer in the format the math prompts ask for (a final ``\\boxed{}``)."""
    return f"We compute the result step by step. The final answer is $\\boxed{{{gold}}}$."


_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def perturb_answer(gold: str) -> str:
    """A different answer: every number in ``gold`` increased by 1 (``(1,8)`` -> ``(2,9)``).

    Without any digit, ``+ 1`` is appended. Used by the self-check that wrong answers score 0.
    """
    if _NUMBER.search(gold):
        return _NUMBER.sub(lambda m: _bump(m.group(0)), gold)
    return f"{gold} + 1"


def _bump(num: str) -> str:
    if "." in num:
        whole, frac = num.split(".")
        return f"{int(whole) + 1}.{frac}"
    return str(int(num) + 1)


def math_instruction(question: str) -> str:
    """The un-templated instruction of a math item (shared with the lm-eval tasks)."""
    from eval.benchmarks.prompts import MATH_INSTRUCTION

    return f"{question.strip()}\n{MATH_INSTRUCTION}"


# -- the benchmark family ----------------------------------------------------------------------------
BASE_STOPS = ("\nQuestion:",)  # ours: the base frame is "Question: ... Answer:"; a new question is invented text


class MathFamily(BenchmarkFamily):
    """The seven math sets: one ``\\boxed{}`` answer per item, equivalence by math-verify."""

    name = "math"

    def prompt(self, item, template: str, tokenizer=None) -> str:
        from eval.benchmarks.prompts import wrap_math

        return wrap_math(math_instruction(item.question), template, tokenizer)

    def stop(self, spec, template: str, tokenizer=None) -> tuple[str, ...]:
        from eval.benchmarks.prompts import template_stops

        return BASE_STOPS if template == "base" else template_stops(template, tokenizer)

    def answer(self, item, record) -> str:
        from eval.benchmarks.prompts import answer_block

        return answer_block(record["completion"], record["template"])

    def answer_from_sample(self, item, sample) -> str:
        return str(sample["answer"])

    def sample_id_field(self) -> tuple[str, ...]:
        return ("id", "task_id")

    def score(self, spec, items, answers, settings) -> dict:
        out: dict = {}
        for who, per_item in answers.items():
            out[who] = {}
            for it in items:
                ok = is_correct(per_item[it.item_id], it.gold)
                out[who][it.item_id] = ScoredAnswer({"acc": ok}, "ok" if ok else "wrong_answer", per_item[it.item_id])
        return out
