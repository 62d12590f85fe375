"""Retention tests of the evolution operators: does a child keep its parent's skill?

From one checkpoint of a run, for every operator: make a child of the best member of a role
(conservative TrueSkill score ``mu - k sigma``; the second parent of a crossover is the second
best), put the child's weights in place of that member (same id, slot and rating; a fresh
optimizer state, as a newly born child gets), and train the whole population for ``steps`` steps.
The reference arm ``parent`` is the same member continuing unchanged (its optimizer state kept);
``copy_parent`` (identical weights, fresh optimizer) and ``linear_0_5`` (crossover by averaging
factors) are the paper's controls. Recorded per step: the member's mean reward
(``member/<id>/reward_mean``), solve rate (students) or valid rate (teachers), and TrueSkill mu.

Identical conditions: every arm restores the same checkpoint into the same ``SelfPlay`` object,
and every random draw of a step is seeded by (run seed, step, purpose), so arms differ only by the
member's weights and optimizer state. The other members train too (they co-adapt with the child,
as in a real run); evolution itself is switched off so that no arm loses the member being tested.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import tempfile
from pathlib import Path

PARENT = "parent"
CONTROLS = ("copy_parent", "linear_0_5")


class RetentionError(ValueError):
    """A retention run cannot start (no checkpoint, unknown operator or role, ...)."""


def parse_operators(spec: str | list[str]) -> list[str]:
    """``all`` or a comma-separated list of registered operator names (order kept)."""
    from populora.population.operators import OPERATORS

    names = list(OPERATORS) if spec in ("all", ["all"]) else (
        [s.strip() for s in spec.split(",") if s.strip()] if isinstance(spec, str) else list(spec))
    bad = [n for n in names if n not in OPERATORS]
    if bad or not names:
        raise RetentionError(f"--operators: unknown operator {bad[0]!r} (known: {', '.join(OPERATORS)})" if bad
                             else "--operators: empty list")
    return names


def ranked(members, role: str, rating_cfg) -> list:
    """Members of ``role`` best first by conservative score (ties by id)."""
    from populora.population.ratings import conservative_score

    pool = [m for m in members if m.role == role]
    return sorted(pool, key=lambda m: (-conservative_score(m.rating, rating_cfg), m.id))


def run_arm(sp, ckpt, member_id: str, steps: int, weights=None) -> dict:
    """Restore ``ckpt``, install ``weights`` (None: the member as it is) and train ``steps`` steps."""
    from populora.selfplay.state import restore

    restore(sp, ckpt)
    adapter = sp.members[member_id].adapter
    if weights is not None:
        sp.backend.set_weights(adapter, weights)
        sp.backend.reset_optimizer(adapter)
    out = {"steps": [], "reward_mean": [], "solve_rate": [], "valid_rate": [], "mu": []}
    for k in range(1, steps + 1):
        step = ckpt.step + k
        row = sp.step(step)
        out["steps"].append(step)
        for key in ("reward_mean", "solve_rate", "valid_rate", "mu"):
            v = row.get(f"member/{member_id}/{key}")
            out[key].append(float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None)
    return out


def summarise(arms: dict[str, dict]) -> list[dict]:
    """Per arm: mean and final reward, gap to the parent arm, first step at or above the parent."""
    parent = arms.get(PARENT)
    rows = []
    for name, a in arms.items():
        r = a["reward_mean"]
        vals = [x for x in r if x is not None]
        row = {"arm": name, "kind": a.get("kind", ""), "reward_mean": sum(vals) / len(vals) if vals else None,
               "reward_final": r[-1] if r else None}
        if parent is not None and name != PARENT:
            gaps = [x - p for x, p in zip(r, parent["reward_mean"]) if x is not None and p is not None]
            row["gap_to_parent_mean"] = sum(gaps) / len(gaps) if gaps else None
            row["gap_to_parent_final"] = gaps[-1] if gaps else None
            row["steps_to_parent_level"] = next(
                (i + 1 for i, (x, p) in enumerate(zip(r, parent["reward_mean"]))
                 if x is not None and p is not None and x >= p), None)
        rows.append(row)
    return rows


def retention(run_dir: str | os.PathLike, operators: list[str], steps: int, *, role: str | None = None,
              out_dir: str | os.PathLike | None = None, checkpoint: str | os.PathLike | None = None,
              seed: int = 0, log=print) -> dict:
    """Run every arm; write ``retention.json``, ``retention.csv`` and ``retention.png`` to ``out_dir``."""
    from populora.checkpoint import load_checkpoint, load_latest
    from populora.population.operators import get_operator, make_child
    from populora.run_dir import RunDir
    from populora.selfplay.loop import SelfPlay

    run_dir = Path(run_dir)
    run = RunDir(run_dir)
    if steps < 1:
        raise RetentionError(f"--steps must be >= 1, got {steps}")
    if not run.holds_run():
        raise RetentionError(f"{run.config_file}: missing; is {run_dir} a run directory?")
    cfg = run.read_config()
    # no evolution during the test: it could replace the member under test in some arms only
    cfg.evolution = dataclasses.replace(cfg.evolution, fraction=0.0)
    ckpt = load_checkpoint(checkpoint) if checkpoint else load_latest(run.checkpoints)
    if ckpt is None:
        raise RetentionError(f"{run.checkpoints}: no usable checkpoint")
    out_dir = Path(out_dir) if out_dir else run_dir / "retention"
    out_dir.mkdir(parents=True, exist_ok=True)

    from populora.population.members import Member

    members = [Member.from_dict(d) for d in ckpt.state["members"]]
    roles = sorted({m.role for m in members})
    role = role or ("student" if "student" in roles else roles[0])
    if role not in roles:
        raise RetentionError(f"--role {role!r}: the checkpoint has members of roles {roles} only")
    best = ranked(members, role, cfg.ratings)
    parent, second = best[0], (best[1] if len(best) > 1 else None)

    arms: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="retention-") as scratch:  # the loop's examples/lineage files
        sp = SelfPlay(cfg, scratch)
        try:
            log(f"retention: {role} {parent.id} from step {ckpt.step}, {steps} steps, arm {PARENT}")
            arms[PARENT] = {"kind": "reference", **run_arm(sp, ckpt, parent.id, steps)}
            for i, name in enumerate(operators):
                spec = get_operator(name)
                if spec.parents == 2 and second is None:
                    skipped[name] = f"needs two parents; role {role} has one member"
                    continue
                ids = [parent.id] + ([second.id] if spec.parents == 2 else [])
                weights = make_child(name, [ckpt.adapters[sp_adapter(ckpt, mid)] for mid in ids],
                                     seed=seed * 1000 + i, **cfg.evolution.params(name))
                log(f"retention: arm {name} ({spec.kind}, parents {', '.join(ids)})")
                arms[name] = {"kind": spec.kind, "parents": ids, **run_arm(sp, ckpt, parent.id, steps, weights)}
        finally:
            sp.close()

    result = {"run_dir": str(run_dir), "checkpoint_step": ckpt.step, "role": role, "member": parent.id,
              "second_parent": second.id if second else None, "steps": steps, "seed": seed, "arms": arms,
              "reward_at_checkpoint": reward_at(run_dir, ckpt.step, parent.id),
              "skipped": skipped, "summary": summarise(arms)}
    write_outputs(result, out_dir)
    return result


def reward_at(run_dir: Path, step: int, member_id: str) -> float | None:
    """The member's mean reward logged by the run itself at ``step`` (the level to recover)."""
    from populora.diagnostics.runs import finite
    from populora.run_dir import RunDir

    for row in RunDir(run_dir).read_metrics():
        if row.get("step") == step and finite(v := row.get(f"member/{member_id}/reward_mean")):
            return float(v)
    return None


def sp_adapter(ckpt, member_id: str) -> str:
    """The adapter name of ``member_id`` in a checkpoint."""
    for d in ckpt.state["members"]:
        if d["id"] == member_id:
            return d["adapter"]
    raise RetentionError(f"member {member_id!r} is not in checkpoint {ckpt.path}")


def write_outputs(result: dict, out_dir: Path) -> None:
    (out_dir / "retention.json").write_text(json.dumps(result, indent=1))
    with open(out_dir / "retention.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["arm", "kind", "step", "reward_mean", "solve_rate", "valid_rate", "mu"])
        for name, a in result["arms"].items():
            for i, s in enumerate(a["steps"]):
                w.writerow([name, a["kind"], s] + [a[k][i] for k in ("reward_mean", "solve_rate", "valid_rate", "mu")])
    from populora.diagnostics import plots

    fig = plots.retention([(Path(result["run_dir"]).name, result)])
    fig.savefig(out_dir / "retention.png", dpi=110)
    plots.plt.close(fig)
