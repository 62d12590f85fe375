"""`populora report` on hand-made run directories (a real `tiny` run: test_diagnostics_retention.py)."""

import json
from pathlib import Path

import numpy as np
import pytest

from populora.cli import main
from populora.diagnostics import arms_race as ar
from populora.diagnostics.lineage import events_table, lives
from populora.diagnostics.report import build_report
from populora.diagnostics.runs import RunDirError, load_run

FIGURES = ("solve_rates", "complexity", "coverage", "ratings", "rating_spread", "entropy_length", "lineage")

PROGRAMS = [
    "def f(x):\n    return x + 1\n",
    "def f(x):\n    if x > 2:\n        return x * 2\n    return -x\n",
    "def f(s):\n    out = []\n    for c in s:\n        if c.isdigit() and c != '0':\n            out.append(c)\n    return out\n",
    "def f(n):\n    a, b = 0, 1\n    while n:\n        a, b = b, a + b\n        n -= 1\n    return a\n",
]


def _jsonl(path: Path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _member(mid, role, slot, born=0, parents=(), op=None):
    return {"id": mid, "role": role, "adapter": mid, "rating": {"mu": 25.0, "sigma": 8.3}, "slot": slot,
            "parents": list(parents), "operator": op, "params": {}, "seed": None, "born_step": born,
            "generation": 1 if parents else 0}


def make_run(root: Path, name: str, baseline: bool, steps: int = 6) -> Path:
    """A run directory written by hand with the runner's file layout (test input only)."""
    rd = root / name
    (rd / "checkpoints" / f"step_{steps:06d}").mkdir(parents=True)
    pop = "{teachers: 1, students: 1, baseline: true}" if baseline else "{teachers: 2, students: 2}"
    (rd / "config.yaml").write_text(f"name: {name}\npopulation: {pop}\n")
    ids = ["a0"] if baseline else ["t0", "t1", "s0", "s1"]
    rows = []
    for s in range(1, steps + 1):
        row = {"step": s}
        for i, tt in enumerate(("code_o", "code_i", "code_f")):
            row[f"student/{tt}/solve_rate"] = min(1.0, 0.2 * i + 0.15 * s) if baseline else 0.3 + 0.1 * ((s + i) % 3)
            row[f"teacher/{tt}/valid_rate"] = 0.5
        live = ids if (baseline or s < 3) else ["t0", "t1-3", "s0", "s1"]
        for j, mid in enumerate(live):
            row[f"adapter/{mid}/sequences"] = 12
            row[f"adapter/{mid}/completion_tokens"] = 12 * (40 - (s * 5 if baseline else j))
            row[f"train/{mid}/entropy/mean"] = (2.0 - 0.3 * s) if baseline else 2.0 + 0.05 * j
            row[f"member/{mid}/reward_mean"] = 0.1 * j
            if not baseline:
                row[f"member/{mid}/mu"] = 25.0 + (j - 1.5) * s
                row[f"member/{mid}/sigma"] = 8.3 - 0.5 * s
        rows.append(row)
    _jsonl(rd / "metrics.jsonl", rows)
    if baseline:
        lineage = [{"event": "founder", "step": 0, "member": _member("a0", "agent", 0), "replaced": None}]
    else:
        lineage = [{"event": "founder", "step": 0, "member": _member(m, "teacher" if m[0] == "t" else "student",
                                                                     int(m[1])), "replaced": None} for m in ids]
        lineage.append({"event": "replacement", "step": 3, "member": _member("t1-3", "teacher", 1, 3, ["t0"],
                                                                             "svd_perturb"),
                        "replaced": "t1", "replaced_score": -2.5, "kind": "mutation"})
    _jsonl(rd / "lineage.jsonl", lineage)
    author = (lambda s: "a0") if baseline else (lambda s: "t0" if s % 2 else ("t1" if s < 3 else "t1-3"))
    examples = []
    for s in range(1, steps + 1):
        p = PROGRAMS[0] if baseline else PROGRAMS[s % len(PROGRAMS)]
        examples.append({"step": s, "teacher": author(s), "type": "code_o", "valid": True, "program": p,
                         "input": "3", "output": "4", "message": "", "student_correct": 1, "student_attempts": 2})
        examples.append({"step": s, "teacher": author(s), "type": "code_i", "valid": False, "reason": "syntax_error"})
    _jsonl(rd / "examples.jsonl", examples)
    tasks = [{"id": f"seed-{i}", "type": "code_o", "program": p, "input": "1", "output": "2", "teacher_id": "seed",
              "step": 0} for i, p in enumerate(PROGRAMS[:2])]
    tasks += [{"id": f"x{s}", "type": "code_i", "program": PROGRAMS[(s + 1) % len(PROGRAMS)], "input": "2",
               "output": "3", "teacher_id": author(s), "step": s} for s in range(1, steps + 1) if not baseline]
    state = {"step": steps, "members": [], "buffers": {"code_o": {"type": "code_o", "capacity": 64, "tasks": tasks}}}
    (rd / "checkpoints" / f"step_{steps:06d}" / "state.json").write_text(json.dumps(state))
    return rd


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    return make_run(root, "pop", baseline=False), make_run(root, "base", baseline=True)


def _check_png(path: Path) -> None:
    import matplotlib.image as mpimg

    assert path.is_file() and path.stat().st_size > 10_000, path
    img = mpimg.imread(path)
    assert img.shape[0] > 200 and img.shape[1] > 300
    assert float(np.std(img[..., :3])) > 0.02  # not a blank canvas


def test_load_run_reads_every_file(runs):
    pop = load_run(runs[0])
    assert pop.name == "pop" and not pop.baseline and pop.steps == [1, 2, 3, 4, 5, 6]
    assert pop.role_of("t1-3") == "teacher" and pop.role_of("s1") == "student"
    assert len(pop.seed_tasks) == 2 and all(t.teacher != "seed" for t in pop.tasks)
    # buffer tasks (code_i) and example rows (code_o) are merged; the two buffer copies are one task
    assert sorted({t.type for t in pop.tasks}) == ["code_i", "code_o"] and len(pop.tasks) == 12
    assert "checkpoint buffers (1 checkpoints)" in pop.task_source
    base = load_run(runs[1])
    assert base.baseline and base.role_of("a0") == "agent" and len(base.tasks) == 6


def test_lineage_and_arms_race_series(runs):
    pop = load_run(runs[0])
    life = lives(pop.lineage)
    assert life["t1"].died == 3 and life["t1-3"].born == 3 and life["t0"].died is None
    ev = events_table(pop.lineage)
    assert [(e["child"], e["replaced"], e["operator"], e["parents"]) for e in ev] == [("t1-3", "t1", "svd_perturb",
                                                                                      "t0")]
    by_role = ar.ids_by_role(pop.roles, pop.metrics)
    assert by_role == {"student": ["s0", "s1"], "teacher": ["t0", "t1", "t1-3"]}
    steps, means, stds = ar.rating_stats(pop.metrics, by_role)["student"]
    # students are j = 2, 3: mu = 25 + 0.5 s and 25 + 1.5 s
    assert steps == [1, 2, 3, 4, 5, 6] and means[1] == pytest.approx(27.0) and stds[1] == pytest.approx(1.0)
    assert ar.member_series(pop.metrics, "s0", ar.response_length)[1][0] == pytest.approx(38.0)
    assert ar.has_entropy(pop.metrics)
    assert ar.by_task_type(pop.metrics, "student", "solve_rate").keys() == {"code_o", "code_i", "code_f"}


@pytest.mark.slow
def test_report_renders_every_figure(runs, tmp_path):
    rep = build_report(list(runs), tmp_path / "report.html")
    assert set(rep.figures) == set(FIGURES)  # no retention results in these runs
    for path in rep.figures.values():
        _check_png(path)
    page = rep.html.read_text()
    assert page.count("data:image/png;base64,") == len(FIGURES)
    for name in FIGURES:
        assert f'id="{name}"' in page
    assert "t1-3" in page and "svd_perturb" in page  # events table
    assert "syntax_error" in page and "return x + 1" in page  # example tasks
    cov = rep.data["coverage"]["runs"]
    for c in cov.values():
        assert all(b >= a for a, b in zip(c["coverage"], c["coverage"][1:]))
    # the baseline repeats one program: one cell; the population writes four different ones
    assert cov["base"]["coverage"][-1] == pytest.approx(1 / 256)
    assert cov["pop"]["coverage"][-1] > cov["base"]["coverage"][-1]
    assert (rep.folder / "coverage_centroids.npy").is_file()
    # per role, type and step: the baseline's code_o program is PROGRAMS[0] (cyclomatic 1, 2 lines)
    per = rep.data["complexity_by_role_type_step"]
    assert per["base"]["4"]["complexity/agent/code_o/loc"] == 2
    # pop step 1: code_i buffer task PROGRAMS[2] (for, if, and: 4), code_o example PROGRAMS[1] (if: 2)
    assert per["pop"]["1"]["complexity/teacher/code_i/cyclomatic"] == 4
    assert per["pop"]["1"]["complexity/teacher/all/cyclomatic"] == 3


def test_report_cli_and_errors(runs, tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", str(runs[0]), "--out", str(out), "--example-steps", "2"]) == 0
    assert out.is_file() and (tmp_path / "r_files" / "lineage.png").is_file()
    assert main(["report", str(tmp_path), "--out", str(tmp_path / "x.html")]) == 2
    assert "metrics.jsonl" in capsys.readouterr().err
    with pytest.raises(RunDirError, match="not a directory"):
        load_run(tmp_path / "missing")



def test_tasks_jsonl_is_preferred_over_buffers(tmp_path):
    rd = make_run(tmp_path, "pop", baseline=False)
    task = {"id": "code_f-1", "type": "code_f", "program": PROGRAMS[3], "inputs": ["1", "2"], "outputs": ["1", "1"],
            "message": "fib", "n_shown": 1, "teacher_id": "t0", "step": 2}
    _jsonl(rd / "tasks.jsonl", [task, {**task, "teacher_id": "seed", "step": 0}])
    run = load_run(rd)
    assert run.task_source == "tasks.jsonl"
    assert [(t.step, t.type, t.teacher) for t in run.tasks] == [(2, "code_f", "t0")] and len(run.seed_tasks) == 1
