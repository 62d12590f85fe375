"""An lm-eval model answering through PopuLoRA's multi-adapter engine, and the local math tasks.

``PopuLoRALM(backend, adapter=..., template=...)`` is an ``lm_eval.api.model.LM`` registered as
``populora``. Its ``generate_until`` wraps each context in the evaluation template
(``eval.benchmarks.prompts.wrap_math``) and sends all requests in one greedy ``backend.generate`` call for the
chosen adapter (``None``: the base model). One backend with every adapter loaded serves any number
of ``simple_evaluate`` calls, one per adapter, without restarting an engine.

``task_configs(names, data_dir)`` loads the ``populora_*`` YAMLs of ``eval/tasks/`` and points
their ``data_files`` at the benchmarks directory in use, so::

    import lm_eval
    from eval.runner.lm_eval_model import PopuLoRALM, task_configs, task_manager
    lm = PopuLoRALM(backend, adapter="run__s0")
    out = lm_eval.simple_evaluate(model=lm, tasks=task_configs(["gsm8k"]), task_manager=task_manager(), limit=20)
    out["results"]["populora_gsm8k"]["math_verify,none"]

Only generation tasks are supported (the math tasks are ``generate_until``); the log-likelihood
requests of multiple-choice tasks raise ``NotImplementedError`` saying so.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from eval.benchmarks import MATH_BENCHMARKS, benchmark_path

TASKS_DIR = Path(__file__).resolve().parents[1] / "tasks"


@register_model("populora")
class PopuLoRALM(LM):
    def __init__(self, backend=None, adapter: str | None = None, template: str = "base", batch_size: int = 64, **kwargs) -> None:
        super().__init__()
        if backend is None:
            # built from a model_args string: pretrained=tiny,adapter_dir=PATH
            from eval.runner.engine import make_engine
            from eval.runner.runs import EvalAdapter
            from eval.runner.settings import EvalSettings
            from populora.policy.config import PolicyConfig

            model = kwargs.pop("pretrained", "tiny")
            adapter_dir = kwargs.pop("adapter_dir", None)
            members = [EvalAdapter("cli", "adapter", "student", Path(adapter_dir))] if adapter_dir else []
            backend = make_engine(EvalSettings(policy=PolicyConfig(model=model)), members)
            adapter = members[0].key if members else None
        self.backend = backend
        self.adapter = adapter
        self.template = template
        self.chunk = int(batch_size)

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        from eval.benchmarks.prompts import template_stops, wrap_math
        from populora.policy.base import GenerationRequest, SamplingParams

        out: list[str] = [""] * len(requests)
        # one generate call per distinct (stop strings, budget); lm-eval tasks use one setting each
        groups: dict[tuple, list[int]] = {}
        for n, req in enumerate(requests):
            _, kw = req.args
            until = kw.get("until") or []
            until = (until,) if isinstance(until, str) else tuple(until)
            until = tuple(dict.fromkeys(until + template_stops(self.template, self.backend.tokenizer)))
            groups.setdefault((until, int(kw.get("max_gen_toks", 256))), []).append(n)
        for (until, budget), idx in groups.items():
            sampling = SamplingParams(temperature=0.0, max_new_tokens=budget, stop=until)
            for s in range(0, len(idx), self.chunk):
                part = idx[s : s + self.chunk]
                reqs = [GenerationRequest(wrap_math(requests[n].args[0], self.template, self.backend.tokenizer), self.adapter)
                        for n in part]
                for n, res in zip(part, self.backend.generate(reqs, sampling)):
                    out[n] = res.completions[0].text
        return out

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError("the populora lm-eval model serves generate_until tasks only (the math tasks)")

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError("the populora lm-eval model serves generate_until tasks only (the math tasks)")


def task_manager():
    """An lm-eval TaskManager that knows only our ``eval/tasks`` (fast: skips lm-eval's catalogue)."""
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=str(TASKS_DIR), include_defaults=False)


def task_configs(names: Sequence[str] = MATH_BENCHMARKS, data_dir=None) -> list[dict]:
    """Configs of the ``populora_<name>`` tasks with ``data_files`` under the benchmarks directory."""
    out = []
    for name in names:
        if name not in MATH_BENCHMARKS:
            raise ValueError(f"no lm-eval task for {name!r} (math sets: {', '.join(MATH_BENCHMARKS)})")
        path = benchmark_path(name, data_dir)  # the user's copy, else the shipped one
        cfg = _load_task_yaml(TASKS_DIR / f"populora_{name}.yaml")
        cfg["dataset_kwargs"] = {"data_files": {"test": str(path)}}
        out.append(cfg)
    return out


def _load_task_yaml(path: Path) -> dict:
    """lm-eval's own YAML loader (resolves ``!function``); its location moved across versions."""
    try:
        from lm_eval.tasks._yaml_loader import load_yaml
    except ImportError:  # lm-eval < 0.4.10
        from lm_eval.utils import load_yaml_config as load_yaml
    return dict(load_yaml(path))
