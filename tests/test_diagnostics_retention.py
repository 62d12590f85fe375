"""Retention harness: pure summaries, and every operator on a real `tiny` run (slow)."""

import json
from pathlib import Path

import pytest

from populora.diagnostics.retention import PARENT, RetentionError, parse_operators, summarise

REPO = Path(__file__).resolve().parents[1]
# `tiny` made cheaper for CI: one step, one teacher (two students so that crossovers have two
# parents), three sequences per adapter (one proposal per task type, one task x 3 rollouts) and
# short completions; every arm of the harness costs one such step
FAST = ["selfplay.steps=1", "population.teachers=1", "selfplay.sequences_per_adapter=3", "selfplay.rollouts=3",
        "selfplay.teacher_sampling.max_new_tokens=8", "selfplay.student_sampling.max_new_tokens=8"]


def test_parse_operators():
    from populora.population.operators import OPERATORS

    assert parse_operators("all") == list(OPERATORS)
    assert parse_operators("copy_parent, linear_0_5") == ["copy_parent", "linear_0_5"]
    with pytest.raises(RetentionError, match="unknown operator 'nope'"):
        parse_operators("copy_parent,nope")
    with pytest.raises(RetentionError, match="empty"):
        parse_operators(" , ")


def test_summarise_gaps_and_recovery():
    arms = {
        PARENT: {"kind": "reference", "reward_mean": [0.5, 0.5, 0.6, 0.6]},
        "svd_perturb": {"kind": "mutation", "reward_mean": [0.1, 0.3, 0.6, 0.7]},
        "dare": {"kind": "crossover", "reward_mean": [0.0, None, 0.2, 0.4]},
    }
    rows = {r["arm"]: r for r in summarise(arms)}
    assert rows[PARENT]["reward_mean"] == pytest.approx(0.55) and "gap_to_parent_mean" not in rows[PARENT]
    s = rows["svd_perturb"]
    assert s["gap_to_parent_mean"] == pytest.approx((-0.4 - 0.2 + 0.0 + 0.1) / 4)
    assert s["gap_to_parent_final"] == pytest.approx(0.1) and s["steps_to_parent_level"] == 3
    d = rows["dare"]
    assert d["reward_mean"] == pytest.approx(0.2) and d["steps_to_parent_level"] is None
    assert d["gap_to_parent_final"] == pytest.approx(-0.2)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from populora.selfplay.runner import train

    rd = tmp_path_factory.mktemp("retention") / "tiny"
    train(str(REPO / "configs" / "tiny.yaml"), FAST, run_dir=str(rd), progress=False)
    return rd


@pytest.mark.slow
def test_arms_start_from_identical_conditions(tiny_run, tmp_path):
    from populora.checkpoint import load_latest
    from populora.config import config_from_yaml_text
    from populora.diagnostics.retention import run_arm
    from populora.population.operators import make_child
    from populora.selfplay.loop import SelfPlay
    from populora.selfplay.state import restore

    cfg = config_from_yaml_text((tiny_run / "config.yaml").read_text())
    ckpt = load_latest(tiny_run / "checkpoints")
    sp = SelfPlay(cfg, tmp_path)
    adapter = next(d["adapter"] for d in ckpt.state["members"] if d["id"] == "s0")
    try:
        first = run_arm(sp, ckpt, "s0", 1)
        # leave state behind that a leaky restore would carry into the next arm
        sp.backend.set_weights(adapter, make_child("full_gaussian", [ckpt.adapters[adapter]], seed=1))
        sp.buffers = type(sp.buffers)()
        again = run_arm(sp, ckpt, "s0", 1)
        done = sp.step_done
        restore(sp, ckpt)
        restored = sp.backend.get_weights(adapter)
    finally:
        sp.close()
    assert first == again  # restoring the checkpoint resets everything the step depends on
    assert first["steps"] == [ckpt.step + 1] and first["reward_mean"][0] is not None
    assert done == ckpt.step + 1 and first["mu"][0] is not None
    assert restored.equal(ckpt.adapters[adapter])


@pytest.mark.slow
def test_retention_every_operator_and_report(tiny_run, tmp_path, capsys):
    import matplotlib.image as mpimg
    import numpy as np

    from populora.cli import main
    from populora.diagnostics.report import build_report
    from populora.population.operators import OPERATORS

    assert main(["retention", str(tiny_run), "--operators", "all", "--steps", "1"]) == 0
    printed = capsys.readouterr().out

    res = json.loads((tiny_run / "retention" / "retention.json").read_text())
    assert set(res["arms"]) == {PARENT, *OPERATORS}  # tiny has two students: crossovers run too
    assert res["role"] == "student" and res["second_parent"] is not None and not res["skipped"]
    logged = [json.loads(x) for x in (tiny_run / "metrics.jsonl").read_text().splitlines()]
    assert res["reward_at_checkpoint"] == logged[-1][f"member/{res['member']}/reward_mean"]
    for arm in res["arms"].values():
        assert len(arm["reward_mean"]) == 1 and arm["reward_mean"][0] is not None
    for name in OPERATORS:
        assert name in printed
    assert (tiny_run / "retention" / "retention.csv").read_text().count("\n") == 1 + len(res["arms"])
    assert (tiny_run / "retention" / "retention.png").stat().st_size > 10_000

    rep = build_report([tiny_run], tmp_path / "tiny.html")
    assert "retention" in rep.figures
    for path in rep.figures.values():
        img = mpimg.imread(path)
        assert path.stat().st_size > 5_000 and float(np.std(img[..., :3])) > 0.02, path  # not blank
    assert rep.data["coverage"]["runs"]["tiny"]["steps"] == [1]
    assert 'id="retention"' in rep.html.read_text()
