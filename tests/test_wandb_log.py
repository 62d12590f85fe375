"""Weights & Biases as an optional logger: one run id across resume and requeue, files under the run
directory, config and lineage logged, a clear error without the package. Offline only (no network)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from populora.config import Config, ConfigError, load_config, wandb_mode
from populora.selfplay import wandb_log
from populora.selfplay.metrics import MetricsLog

HAS_WANDB = importlib.util.find_spec("wandb") is not None


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-default"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))


@pytest.mark.parametrize("text, mode", [("off", "off"), ("False", "off"), ("offline", "offline"),
                                        ("ONLINE", "online"), ("maybe", None)])
def test_wandb_mode(text, mode):
    assert wandb_mode(text) == mode


def test_config_key_defaults_off_and_rejects_unknown_modes():
    assert load_config(None, []).run.wandb == "off"
    assert wandb_mode(load_config(None, ["run.wandb=off"]).run.wandb) == "off"  # YAML's bare off
    with pytest.raises(ConfigError, match="run.wandb.*must be off, offline or online, got 'sometimes'"):
        load_config(None, ["run.wandb=sometimes"])


def test_missing_package_is_a_clear_error(monkeypatch):
    cfg = load_config(None, ["run.wandb=offline"])
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match=r"wandb package is not installed: pip install 'populora\[wandb\]'"):
        wandb_log.require_wandb(cfg)
    assert wandb_log.require_wandb(load_config(None, [])) == "off"  # off never needs it


def test_run_id_is_made_once_and_kept(tmp_path):
    ids = iter(["first", "second"])
    assert wandb_log.run_id(tmp_path, lambda: next(ids)) == "first"
    assert wandb_log.run_id(tmp_path, lambda: next(ids)) == "first"
    assert (tmp_path / "wandb_id").read_text().strip() == "first"


def test_init_kwargs_resume_the_same_run_under_the_run_directory(tmp_path):
    cfg = load_config(None, ["run.wandb=offline", "run.wandb_group=populations-7b", "run.wandb_name=4t4s-s0"])
    kw = wandb_log.init_kwargs(cfg, tmp_path, "offline", "abc")
    assert (kw["id"], kw["resume"], kw["mode"], kw["dir"]) == ("abc", "allow", "offline", str(tmp_path))
    assert (kw["project"], kw["group"], kw["name"]) == ("populora", "populations-7b", "4t4s-s0")
    assert kw["config"]["run"]["wandb"] == "offline" and kw["config"]["population"]["teachers"] == cfg.population.teachers
    plain = wandb_log.init_kwargs(Config(name="mine"), tmp_path, "online", "x")
    assert (plain["group"], plain["name"]) == (None, "mine")


def test_scalars_and_lineage_rows():
    assert wandb_log.scalars({"a": 1, "b": None, "c": float("nan"), "d": True, "e": 0.5}) == {"a": 1, "e": 0.5}
    rows = wandb_log.lineage_rows([{"step": 3, "event": "replacement", "replaced": "t1",
                                    "member": {"id": "t4", "role": "teacher", "operator": "svd_perturb",
                                               "parents": ["t0"]}}])
    assert rows == [[3, "replacement", "t4", "teacher", "svd_perturb", '["t0"]', "t1"]]


def test_sweep_runs_group_together():
    from jobs import sweep

    spec = sweep.spec_from_dict({"name": "pop", "config": "configs/tiny.yaml", "populations": ["1t1s"],
                                 "seeds": [0, 1]}, "t.yaml")
    runs = sweep.expand_runs(spec)
    assert all("run.wandb_group=pop" in r.overrides for r in runs)
    assert [o for r in runs for o in r.overrides if o.startswith("run.wandb_name=")] == [
        "run.wandb_name=1t1s-s0", "run.wandb_name=1t1s-s1"]


@pytest.mark.skipif(not HAS_WANDB, reason="wandb is not installed (pip install 'populora[wandb]')")
def test_offline_run_stopped_and_resumed_writes_to_one_run_id(tmp_path):
    rd = tmp_path / "run"
    rd.mkdir()
    (rd / "lineage.jsonl").write_text(json.dumps({"step": 0, "event": "birth", "member": {"id": "t0"}}) + "\n")
    cfg = load_config(None, ["run.wandb=offline", "run.wandb_group=g"])
    ids = []
    for steps in ((1, 2), (3, 4)):  # a first start, then a resume (as after SIGUSR2 or a requeue)
        log = MetricsLog(rd, tensorboard=False, sinks=[wandb_log.open_wandb(cfg, rd)])
        for step in steps:
            log.log(step, {"teacher/valid_rate": 0.5, "time/step_s": 1.0})
        ids.append(log.sinks[0].id)
        log.close()
    assert ids[0] == ids[1] == (rd / "wandb_id").read_text().strip()
    runs = sorted((rd / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(p.name.endswith(f"-{ids[0]}") for p in runs)  # W&B's files, one id
    assert not (tmp_path / "wandb-default").exists()  # nothing outside the run directory
    assert len((rd / "metrics.jsonl").read_text().splitlines()) == 4
