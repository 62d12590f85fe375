"""Generation engines are modules: ``populora/policy/<name>_engine.py`` is all an engine needs.

The registry against docs/backends.md's table of engines, what every registered class declares, and
a throwaway engine module written into a private copy of the package (``package_tree``): ``populora
plan``, ``populora train`` and ``populora eval`` accept it with no other file edited (each in a
subprocess, as a user runs them: the registry is read once per process).
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from test_eval_e2e import DATA  # tests/ is on sys.path (as for conftest)

from populora.policy.config import PolicyConfig, PolicyConfigError, engine_sections
from populora.policy.engine import GenerationEngine, engines

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "backends.md"
ROW = re.compile(r"^\| `([a-z][a-z0-9_]*)` \| `populora/policy/([a-z0-9_]+)_engine\.py` \| ([^|]+) \|", re.M)


def doc_engines() -> dict[str, str]:
    """``{name: summary}`` of the rows of docs/backends.md's table of engines."""
    rows = ROW.findall(DOC.read_text())
    assert rows, "docs/backends.md has no table of engines (| `name` | `populora/policy/name_engine.py` | summary |)"
    for name, module, _ in rows:
        assert name == module, f"docs/backends.md: engine {name} is in module {module}_engine.py"
    return {name: summary.strip() for name, _, summary in rows}


def test_the_docs_table_of_engines_matches_the_registry():
    documented, registered = doc_engines(), engines()
    assert sorted(documented) == sorted(registered), (
        f"docs/backends.md's table of engines names {sorted(documented)}, the registry has {sorted(registered)}")
    for name, cls in registered.items():
        assert documented[name] == cls.summary, f"docs/backends.md: the row of {name} is not its class's summary"


def test_every_engine_class_declares_what_the_rest_of_the_code_asks():
    for name, cls in engines().items():
        assert issubclass(cls, GenerationEngine) and cls.name == name and cls.summary
        assert cls.__module__ == f"populora.policy.{name}_engine"
        if cls.Config is not None:  # its settings are the policy.<name>: section of the run config
            assert name in engine_sections() and isinstance(getattr(PolicyConfig(), name), cls.Config)
        else:
            assert name not in engine_sections() and name not in PolicyConfig.__dataclass_fields__
        assert cls.eval_chunk_size(PolicyConfig()) >= 0


def test_an_unknown_engine_names_the_registered_ones():
    with pytest.raises(PolicyConfigError, match=r"policy.engine must be one of \['hf', 'vllm'"):
        PolicyConfig(engine="nope")


def test_policy_config_is_built_from_the_engine_sections_and_behaves_as_a_written_class():
    import pickle

    from omegaconf import OmegaConf

    assert (PolicyConfig.__module__, PolicyConfig.__qualname__) == ("populora.policy.config", "PolicyConfig")
    cfg = PolicyConfig.from_mapping({"engine": "vllm", "lora": {"rank": 16}, "vllm": {"max_loras": 3}})
    assert pickle.loads(pickle.dumps(cfg)) == cfg and PolicyConfig.from_mapping(cfg.to_dict()) == cfg
    assert list(cfg.to_dict())[-2:] == ["lora", "vllm"]  # the engine sections come last, in name order
    with pytest.raises(PolicyConfigError, match=r"policy.vllm: unknown key\(s\) \['nope'\]"):
        PolicyConfig.from_mapping({"vllm": {"nope": 1}})
    with pytest.raises(PolicyConfigError, match=r"policy.vllm.max_loras must be >= 0"):
        cfg.replace(vllm={"max_loras": -1})
    node = OmegaConf.structured(PolicyConfig)  # as populora.config embeds it
    assert node.vllm.gpu_memory_utilization == 0.45
    with pytest.raises(Exception, match="Key 'nope' not in 'VLLMConfig'"):
        node.vllm.nope = 1


ENGINE_MODULE = '''"""A throwaway engine written by tests/test_engine_registry.py: the trainer's own generation."""

from __future__ import annotations

import os
from dataclasses import dataclass

from populora.policy.engine import GenerationEngine, register_engine
from populora.policy.validation import need

NAME = "{name}"


@dataclass
class Settings:
    knob: int = 1  # a setting of its own: policy.{name}.knob

    def __post_init__(self) -> None:
        need(self.knob >= 1, "policy.{name}.knob", f"must be >= 1, got {{self.knob!r}}")


@register_engine(NAME)
class ThrowawayEngine(GenerationEngine):
    summary = "a test's throwaway engine: the trainer's own generation"
    Config = Settings

    def __init__(self, config, trainer, max_new_tokens=None, context=None) -> None:
        self.trainer, self.knob = trainer, getattr(config, NAME).knob
        self.log = os.environ.get("THROWAWAY_ENGINE_LOG")

    def publish(self, name, weights) -> None:
        """The trainer holds the weights it generates with: nothing to copy."""

    def retire(self, name) -> None:
        """Nothing held."""

    def generate(self, requests, sampling):
        if self.log:
            with open(self.log, "a") as f:
                f.write(f"knob={{self.knob}} requests={{len(requests)}}\\n")
        return self.trainer.generate(requests, sampling)
'''


def run_cli(*args: str, cwd: Path, env: dict, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "populora.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow
def test_an_engine_is_one_module(tmp_path, package_tree):
    """Write ``populora/policy/<name>_engine.py`` (a trivial engine with one setting of its own) into a
    private copy of the package, then plan, train one step and evaluate with it."""
    root, env = package_tree
    name = f"t{uuid.uuid4().hex[:8]}"
    (root / "populora" / "policy" / f"{name}_engine.py").write_text(ENGINE_MODULE.format(name=name))
    log = tmp_path / "engine.log"
    env = {**env, "THROWAWAY_ENGINE_LOG": str(log)}
    tiny = str(REPO / "configs" / "tiny.yaml")
    populora = functools.partial(run_cli, cwd=root)

    # the plan: the engine's section is a config key, its memory is "not modelled"
    done = populora("plan", "--config", tiny, f"policy.engine={name}", f"policy.{name}.knob=3", env=env)
    assert done.returncode == 0, done.stderr
    assert f"engine {name}," in done.stdout and "not modelled" in done.stdout
    done = populora("plan", "--config", tiny, "--json", f"policy.engine={name}", f"policy.{name}.knob=3", env=env)
    out = json.loads(done.stdout)
    assert out["items"]["engine"] == 0 and out["inputs"]["policy"][name] == {"knob": 3}
    done = populora("plan", "--config", tiny, f"policy.engine={name}", f"policy.{name}.knob=0", env=env)
    assert done.returncode == 2 and f"policy.{name}.knob must be >= 1, got 0" in done.stderr

    # a run: one self-play step generates through the engine
    run = tmp_path / "run"
    done = populora("train", "--config", tiny, "--run-dir", str(run), "--quiet", f"policy.engine={name}",
                    f"policy.{name}.knob=2", "selfplay.steps=1", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert log.read_text().count("knob=2 ") >= 1
    log.unlink()

    # the evaluation of that run: --backend takes the engine, --policy its setting
    done = populora("eval", "--help", env=env)
    assert name in done.stdout
    done = populora("eval", "--runs", str(run), "--benchmarks", "gsm8k", "--limit", "2", "--model", "tiny",
                    "--backend", name, "--policy", f"{name}.knob=5", "--max-new-tokens", "gsm8k=8",
                    "--data-dir", str(DATA), "--workdir", str(tmp_path / "work"), env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert log.read_text().count("knob=5 ") >= 1
    scores = json.loads((tmp_path / "work" / "scores.json").read_text())
    assert scores["provenance"]["backend"] == name and {r["key"] for r in scores["rows"]} >= {"base"}
    assert not (REPO / "populora" / "policy" / f"{name}_engine.py").exists()  # the checkout was never written
    assert name not in engines()  # this process never imported it
