"""A task kind with a setting of its own is ONE module: written into populora/tasks/kinds/ (of a
private copy of the package, ``package_tree``), it is in the task environment (its ``tasks.<kind>:`` section, validated), in validation, and in a training run
started with it, with no other file edited."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KINDS = ROOT / "populora" / "tasks" / "kinds"

MODULE = '''"""A test kind: deduction (as code_o) whose inputs may be at most ``tasks.{name}.max_input_chars`` long."""

from __future__ import annotations

from dataclasses import dataclass

from populora.tasks.kinds.code_o import CodeO
from populora.tasks.kinds.registry import register_kind
from populora.tasks.records import BAD_INPUT


@dataclass(frozen=True)
class Knobs:
    max_input_chars: int = 20

    def __post_init__(self) -> None:
        if self.max_input_chars < 1:
            raise ValueError(f"key 'tasks.{name}.max_input_chars': must be >= 1, got {{self.max_input_chars}}")


@register_kind
class ShortInputs(CodeO):
    name = "{name}"
    position = 50
    summary = "deduction with short inputs (a test kind)"
    default_on = False
    seed_order = None
    Knobs = Knobs

    def check_inputs(self, proposal, env):
        reason, inputs = super().check_inputs(proposal, env)
        if reason is None and any(len(i) > self.knobs(env).max_input_chars for i in inputs):
            return BAD_INPUT, ()
        return reason, inputs
'''

CHECK = '''
import sys
from populora.config import ConfigError, load_config
from populora.sandbox import Sandbox, SandboxLimits
from populora.tasks.records import Proposal
from populora.tasks.validation import validate_many

name = sys.argv[1]
cfg = load_config("configs/tiny.yaml", [f"tasks.{name}.max_input_chars=4"])
assert getattr(cfg.tasks, name).max_input_chars == 4
try:
    load_config("configs/tiny.yaml", [f"tasks.{name}.max_input_chars=0"])
    raise SystemExit("a bad knob value was accepted")
except ConfigError as e:
    assert f"tasks.{name}.max_input_chars" in str(e), e
props = [Proposal(type=name, program="def f(x):\\n    return x * 2", inputs=(i,)) for i in ("21", "123456")]
with Sandbox(SandboxLimits(wall_seconds=3, cpu_seconds=3), workers=1) as sb:
    short, long = validate_many(props, sb, cfg.tasks)
assert short.valid and short.task.output == "42", short
assert not long.valid and long.reason == "bad_input", long
print("ok")
'''


@pytest.mark.slow
def test_a_task_kind_with_a_knob_is_one_module(tmp_path, package_tree):
    root, env = package_tree
    name = f"code_t{uuid.uuid4().hex[:6]}"
    (root / "populora" / "tasks" / "kinds" / f"{name}.py").write_text(MODULE.format(name=name))
    check = subprocess.run([sys.executable, "-c", CHECK, name], cwd=root, env=env, capture_output=True,
                           text=True, timeout=300)
    assert check.returncode == 0 and check.stdout.strip() == "ok", check.stderr[-3000:]
    run = tmp_path / "run"
    train = subprocess.run(
        [sys.executable, "-m", "populora.cli", "train", "--quiet", "--config", "configs/tiny.yaml",
         "selfplay.steps=1", f"tasks.types=[code_o,code_i,code_f,{name}]", "selfplay.sequences_per_adapter=12",
         f"tasks.{name}.max_input_chars=8", f"run.dir={run}"],
        cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert train.returncode == 0, train.stderr[-3000:]
    row = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert f"teacher/{name}/valid_rate" in row  # its teachers proposed, under its own name
    assert "max_input_chars: 8" in (run / "config.yaml").read_text()
    assert not (KINDS / f"{name}.py").exists()  # the checkout was never written
