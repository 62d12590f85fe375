"""The lm-eval integration: the populora_* math tasks read the local files and run through
``lm_eval.simple_evaluate`` with the PopuLoRA model class, on the real tiny engine and on a
test-double backend that answers with the gold (which must then score 100%)."""

from __future__ import annotations

import pytest

from eval.benchmarks import MATH_BENCHMARKS, PACKAGED_DIR, benchmarks_dir, load_items
from eval.benchmarks.math_answers import gold_as_completion
from eval.benchmarks.prompts import build_prompt

pytest.importorskip("lm_eval")
from eval.runner.lm_eval_model import PopuLoRALM, task_configs, task_manager  # noqa: E402
from populora.policy.base import Completion, GenerationResult  # noqa: E402
from populora.policy.config import PolicyConfig  # noqa: E402

DATA = benchmarks_dir()  # the shipped test sets (eval/data), or $POPULORA_BENCHMARKS_DIR


class GoldBackend:
    """Test double: answers each prompt with the gold answer of the item whose question it contains."""

    tokenizer = None

    def __init__(self, items):
        self.items = items
        self.prompts = []

    def generate(self, requests, sampling):
        out = []
        for r in requests:
            self.prompts.append(r.prompt)
            gold = next(it.gold for it in self.items if it.question.strip() in r.prompt)
            out.append(GenerationResult([], [Completion([], gold_as_completion(gold), [], "stop")]))
        return out


@pytest.mark.slow
def test_gold_answers_score_100_through_lm_eval():
    import lm_eval

    items = [it for b in MATH_BENCHMARKS for it in load_items(b, data_dir=DATA)[:3]]
    backend = GoldBackend(items)
    res = lm_eval.simple_evaluate(model=PopuLoRALM(backend), tasks=task_configs(MATH_BENCHMARKS, DATA),
                                  task_manager=task_manager(), limit=3)
    for b in MATH_BENCHMARKS:
        assert res["results"][f"populora_{b}"]["math_verify,none"] == 1.0, b
    # lm-eval sees exactly the prompts `populora eval` uses (template "base")
    assert set(backend.prompts) == {build_prompt(it, "base") for it in items}


@pytest.mark.slow
def test_simple_evaluate_on_tiny_engine_with_an_adapter(tmp_path):
    import lm_eval

    from eval.runner.pipeline import EvalSettings, make_engine
    from eval.runner.runs import init_run

    probe = make_engine(EvalSettings(policy=PolicyConfig(model="tiny")), [])
    adapters = init_run(tmp_path / "run", probe.module_shapes(), [("s0", "student")])
    probe.close()
    backend = make_engine(EvalSettings(policy=PolicyConfig(model="tiny")), adapters)
    cfg = task_configs(["gsm8k"], DATA)
    cfg[0]["generation_kwargs"] = {**cfg[0]["generation_kwargs"], "max_gen_toks": 8}
    for adapter in (adapters[0].key, None):  # the adapter, then the base model, same engine
        res = lm_eval.simple_evaluate(model=PopuLoRALM(backend, adapter=adapter), tasks=cfg,
                                      task_manager=task_manager(), limit=2)
        assert 0.0 <= res["results"]["populora_gsm8k"]["math_verify,none"] <= 1.0
    with pytest.raises(NotImplementedError, match="generate_until"):
        PopuLoRALM(backend).loglikelihood([])
    backend.close()


def test_task_configs_point_at_the_given_directory(tmp_path):
    [cfg] = task_configs(["gsm8k"], tmp_path)  # not in the user's directory: the shipped copy
    assert cfg["dataset_kwargs"]["data_files"]["test"] == str(PACKAGED_DIR / "gsm8k" / "test.jsonl")
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "test.jsonl").write_text("")
    [cfg] = task_configs(["gsm8k"], tmp_path)
    assert cfg["task"] == "populora_gsm8k" and cfg["dataset_path"] == "json"
    assert cfg["dataset_kwargs"]["data_files"]["test"] == str(tmp_path / "gsm8k" / "test.jsonl")
    with pytest.raises(ValueError, match="no lm-eval task"):
        task_configs(["humaneval_plus"])
