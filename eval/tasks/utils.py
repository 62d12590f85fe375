"""Hooks of the ``populora_*`` lm-eval math tasks: the same gold answers, prompt text and
math-verify scoring as ``populora eval`` (``eval.benchmarks`` readers, ``eval.benchmarks.prompts``,
``eval.benchmarks.math_answers``)."""

from __future__ import annotations

from eval.benchmarks import BENCHMARKS
from eval.benchmarks.math_answers import is_correct, math_instruction


def _process(bench: str):
    reader = BENCHMARKS[bench].reader

    def process_docs(dataset):
        def to_doc(row, idx):
            item = reader(bench, idx, row)
            return {"item_id": item.item_id, "question": item.question, "gold": item.gold, "benchmark": bench}

        return dataset.map(to_doc, with_indices=True, remove_columns=dataset.column_names)

    return process_docs


process_docs_aime24 = _process("aime24")
process_docs_aime25 = _process("aime25")
process_docs_amc23 = _process("amc23")
process_docs_math500 = _process("math500")
process_docs_minerva_math = _process("minerva_math")
process_docs_gsm8k = _process("gsm8k")
process_docs_olympiadbench = _process("olympiadbench")


def doc_to_text(doc: dict) -> str:
    """The un-templated instruction; the ``populora`` lm-eval model wraps it in its template."""
    return math_instruction(doc["question"])


def process_results(doc: dict, results: list[str]) -> dict[str, int]:
    completion = results[0]
    return {"math_verify": int(is_correct(completion, doc["gold"]))}

