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
        assert cfg.model.backend == "vllm" and cfg.lora.rank == 32 and len(cfg.lora.target_modules) == 7
        assert cfg.selfplay.steps == 200 and 1e-5 <= cfg.rl.lr <= 1e-4
    assert load_config(CONFIGS / "8t8s-7b.yaml").population.teachers == 8
    assert load_config(CONFIGS / "baseline-7b.yaml").population.baseline


@pytest.mark.parametrize(
    "override, key",
    [
        ("population.teachers=0", "population.teachers"),
        ("lora.rank=0", "lora.rank"),
        ("model.backend=tpu", "model.backend"),
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
        load_config(CONFIGS / "tiny.yaml", ["model.backend=vllm", "lora.rank=12"])


def test_missing_file_and_malformed_override():
    with pytest.raises(ConfigError, match="not found"):
        load_config("configs/nope.yaml")
    with pytest.raises(ConfigError, match="key=value"):
        load_config(CONFIGS / "tiny.yaml", ["selfplay.steps"])


def test_baseline_split_is_compute_matched():
    cfg = load_config(CONFIGS / "tiny.yaml", ["population.baseline=true", "population.teachers=1", "population.students=1"])
    props, atts = baseline_split(cfg)
    assert props + atts == cfg.selfplay.sequences_per_adapter


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
