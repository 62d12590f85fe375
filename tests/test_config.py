"""Run configuration: presets load, bad keys/values fail at start with the key named."""

from __future__ import annotations

from pathlib import Path

import pytest

from populora.config import ConfigError, baseline_split, load_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
PRESETS = sorted(p for p in CONFIGS.glob("*.yaml"))


def test_every_preset_loads_and_says_what_it_is():
    assert {p.stem for p in PRESETS} >= {"tiny", "cpu-demo", "baseline-cpu", "baseline-7b", "1t1s-7b", "4t4s-7b", "8t8s-7b"}
    for p in PRESETS:
        cfg = load_config(p)
        head = p.read_text().splitlines()[:6]
        assert head[0].startswith("#"), f"{p.name} must start with a comment saying what it is"
        assert any("populora train" in line for line in head), f"{p.name}: the header must give the command"
        assert cfg.name


def test_paper_presets_use_rank_32_all_linear_vllm():
    for name in ("baseline-7b", "1t1s-7b", "4t4s-7b", "8t8s-7b"):
        cfg = load_config(CONFIGS / f"{name}.yaml")
        assert cfg.policy.engine == "vllm" and cfg.policy.lora.rank == 32 and len(cfg.policy.lora.target_modules) == 7
        assert cfg.selfplay.steps == 200 and 1e-5 <= cfg.rl.lr <= 1e-4
    assert load_config(CONFIGS / "8t8s-7b.yaml").population.teachers == 8
    assert load_config(CONFIGS / "baseline-7b.yaml").population.baseline


@pytest.mark.parametrize(
    "override, key",
    [
        ("population.teachers=0", "population.teachers"),
        ("policy.lora.rank=0", "policy.lora.rank"),
        ("policy.engine=tpu", "policy.engine"),
        ("policy.vllm.gpu_memory_utilization=0", "policy.vllm.gpu_memory_utilization"),
        ("policy.train_micro_batch=0", "policy.train_micro_batch"),
        ("tasks.prompt_style=xml", "tasks.prompt_style"),
        ("sandbox.memory_mb=-5", "sandbox.memory_mb"),
        ("sandbox.wall_seconds=0", "sandbox.wall_seconds"),
        ("sandbox.wall_seconds=nan", "sandbox.wall_seconds"),
        ("sandbox.wall_seconds=inf", "sandbox.wall_seconds"),
        ("sandbox.max_output_chars=300", "sandbox.max_output_chars"),
        ("run.collective_timeout_s=0", "run.collective_timeout_s"),
        ("tasks.references=600", "tasks.references"),
        ("selfplay.sequences_per_adapter=7", "selfplay.sequences_per_adapter"),
        ("selfplay.student_sampling.temperature=0", "selfplay.student_sampling.temperature"),
        ("tasks.types=[code_o,code_x]", "tasks.types"),
        ("rl.lr=3", "rl.lr"),
        ("no_such_section.x=1", "no_such_section"),
        ("selfplay.steps=abc", "selfplay.steps"),
        ("population.baseline=true", "population.baseline"),
        ("rl.teacher_estimator=rpp_baseline", "rl.teacher_estimator"),
        ("selfplay.rollouts=1", "selfplay.rollouts"),
    ],
)
def test_bad_values_name_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(CONFIGS / "tiny.yaml", [override])


def test_vllm_rank_must_be_servable():
    with pytest.raises(ConfigError, match="lora.rank"):
        load_config(CONFIGS / "tiny.yaml", ["policy.engine=vllm", "policy.lora.rank=12"])


def test_missing_file_and_malformed_override():
    with pytest.raises(ConfigError, match="not found"):
        load_config("configs/nope.yaml")
    with pytest.raises(ConfigError, match="key=value"):
        load_config(CONFIGS / "tiny.yaml", ["selfplay.steps"])


def test_baseline_split_is_compute_matched():
    cfg = load_config(CONFIGS / "tiny.yaml", ["population.baseline=true", "population.teachers=1", "population.students=1"])
    props, atts = baseline_split(cfg)
    assert props + atts == cfg.selfplay.sequences_per_adapter


# -- keys that moved: old presets keep their meaning, with a one-line deprecation warning ------------
OLD_STYLE = """
name: old
model: {name: smollm2-135m, backend: hf, device: cpu, dtype: float32, prompt_style: r1, max_batch_size: 12,
        cpu_threads: 2, gpu_memory_utilization: 0.3}
lora: {rank: 8, alpha: 16, init: zeros}
rl: {lr: 1.0e-4, micro_batch_size: 3}
"""


def test_old_keys_keep_their_meaning_with_a_warning(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text(OLD_STYLE)
    with pytest.warns(FutureWarning) as record:
        cfg = load_config(path, ["lora.b_std=0.01", "model.max_batch_size=5"])
    p = cfg.policy
    assert (p.model, p.engine, p.device, p.dtype, p.cpu_threads) == ("smollm2-135m", "hf", "cpu", "float32", 2)
    assert p.vllm.gpu_memory_utilization == 0.3 and cfg.tasks.prompt_style == "r1"
    assert (p.lora.rank, p.lora.alpha, p.lora.init, p.lora.b_std) == (8, 16, "zeros", 0.01)
    assert p.train_micro_batch == 3 and p.max_batch_size == 5 and cfg.rl.lr == 1e-4
    messages = [str(w.message) for w in record]
    assert any("'model.name'" in m and "'policy.model'" in m for m in messages)
    assert any("'rl.micro_batch_size'" in m and "'policy.train_micro_batch'" in m for m in messages)
    assert any("command-line" in m and "'lora.b_std'" in m for m in messages)
    assert all("\n" not in m for m in messages)


def test_former_policy_keys_are_renamed(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("policy: {kind: hf, vllm_max_loras: 3, vllm_sleep_between_phases: true, optim: {lr: 2.0e-4}}\n")
    with pytest.warns(FutureWarning, match="policy.vllm_max_loras"):
        cfg = load_config(path)
    assert cfg.policy.engine == "hf" and cfg.policy.vllm.max_loras == 3 and cfg.policy.vllm.sleep_between_phases
    assert cfg.rl.lr == 2e-4


def test_old_and_new_spelling_of_one_key_is_an_error(tmp_path):
    path = tmp_path / "both.yaml"
    path.write_text("model: {name: tiny}\npolicy: {model: smollm2-135m}\n")
    with pytest.raises(ConfigError, match="'model.name'.*'policy.model'"), pytest.warns(FutureWarning):
        load_config(path)


def test_every_policy_key_the_docs_mention_loads():
    """docs/backends.md lists the policy keys in a table; each must be accepted by the loader, and
    every other `policy.*` key the docs mention must be a documented old spelling."""
    import re

    from populora.renamed_keys import new_key

    doc = (CONFIGS.parent / "docs" / "backends.md").read_text()
    keys = sorted(set(re.findall(r"^\| `(policy\.[a-z_.]+)`", doc, re.M)))
    for other in set(re.findall(r"`(policy\.[a-z_.]+[a-z])`", doc)) - set(keys):
        assert new_key(other), f"docs/backends.md mentions {other}, which is neither in the key table nor renamed"
    assert len(keys) >= 15, keys
    from populora.policy.config import LoraSpec, PolicyConfig, engine_sections

    sections = {"policy": PolicyConfig(), "policy.lora": LoraSpec(),
                **{f"policy.{name}": section() for name, section in engine_sections().items()}}
    for key in keys:
        parent, _, leaf = key.rpartition(".")
        assert parent in sections and hasattr(sections[parent], leaf), f"docs/backends.md mentions unknown {key}"
        value = getattr(sections[parent], leaf)
        if isinstance(value, list | dict) or key == "policy.lora" or key.removeprefix("policy.") in engine_sections():
            continue
        load_config(CONFIGS / "tiny.yaml", [f"{key}={value if value != '' else repr('')}"])


@pytest.mark.parametrize(
    "text, match",
    [
        ("model:\n  name: [tiny\n", r"YAML syntax error at line 3, column 1: did not find expected"),
        ("model: {name: tiny\n", r"YAML syntax error at line 2"),
        ("- model\n- lora\n", "must be a YAML mapping of sections, not a list"),
        ("", "empty config file"),
        ("# only a comment\n", "empty config file"),
    ],
)
def test_yaml_errors_list_and_empty_files_are_one_line_errors_naming_the_file(tmp_path, text, match):
    path = tmp_path / "preset.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match) as e:
        load_config(path)
    assert str(e.value).startswith(f"{path}: ") and "\n" not in str(e.value)


def test_train_cli_reports_a_bad_preset_in_one_line(tmp_path, capsys):
    from populora.cli import main

    path = tmp_path / "preset.yaml"
    path.write_text("- a\n")
    assert main(["train", "--config", str(path), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()  # nothing was started


def test_the_former_isolated_calls_key_reads_as_a_layout_of_tasks_calls(tmp_path):
    """issue 37: `tasks.isolated_calls` (a bool) became `tasks.calls` (three layouts); saved run configs
    and overrides with the old key read as the layout it now names, with one warning line."""
    from populora.config import config_from_yaml_text

    with pytest.warns(FutureWarning, match="tasks.isolated_calls=true now reads as tasks.calls=alone"):
        cfg = config_from_yaml_text("tasks:\n  isolated_calls: true\n")
    assert cfg.tasks.calls == "alone"
    with pytest.warns(FutureWarning, match="tasks.calls=together"):
        cfg = load_config(CONFIGS / "tiny.yaml", ["tasks.isolated_calls=false"])
    assert cfg.tasks.calls == "together"
    with pytest.raises(ConfigError, match="'tasks.isolated_calls' must be true or false"):
        load_config(CONFIGS / "tiny.yaml", ["tasks.isolated_calls=maybe"])
    with pytest.raises(ConfigError, match="tasks.calls"):
        load_config(CONFIGS / "tiny.yaml", ["tasks.calls=sometimes"])
