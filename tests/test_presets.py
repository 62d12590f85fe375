"""Every value of the paper-scale presets says where it comes from: ``paper``, ``AZR`` or ``ours``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from populora.config import load_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
PRESETS_7B = sorted(CONFIGS.glob("*-7b.yaml"))
LEAF = re.compile(r"^\s*([A-Za-z_][\w]*):\s*(?P<value>[^#\s][^#]*?)?\s*(#\s*(?P<comment>.*))?$")
LABEL = re.compile(r"^(paper|AZR|ours)\b[:,]? *\S")


def leaves(path: Path) -> list[tuple[int, str, str | None, str | None]]:
    """``(line number, key, value, comment)`` of every key line of a block-style YAML file."""
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = LEAF.match(line)
        assert m, f"{path.name}:{n}: not one key per line (block style): {line!r}"
        out.append((n, m.group(1), m.group("value"), m.group("comment")))
    return out


def test_there_are_paper_scale_presets():
    assert {p.stem for p in PRESETS_7B} >= {"1t1s-7b", "4t4s-7b", "8t8s-7b", "baseline-7b"}


@pytest.mark.parametrize("path", PRESETS_7B, ids=lambda p: p.stem)
def test_every_value_of_a_7b_preset_is_labelled(path):
    unlabelled = [f"{path.name}:{n}: {key}" for n, key, value, comment in leaves(path)
                  if value is not None and not (comment and LABEL.match(comment))]
    assert not unlabelled, "values without a paper/AZR/ours label and a reason:\n" + "\n".join(unlabelled)
    from populora.tasks.kinds import all_kinds

    sections = [key for _, key, value, comment in leaves(path) if value is None]
    kind_sections = {name for name, kind in all_kinds().items() if kind.Knobs is not None}  # tasks.<kind>:
    assert sections and all(s in {"policy", "lora", "vllm", "population", "tasks", "seeds", "selfplay",
                                  "teacher_sampling", "student_sampling", "sandbox", "rl", "ratings",
                                  "evolution", "run"} | kind_sections for s in sections), sections
    load_config(path)  # and it is a valid run config


def test_the_checker_catches_a_missing_label(tmp_path):
    bad = tmp_path / "x-7b.yaml"
    bad.write_text("name: x  # ours: a name\npolicy:\n  model: m\n  dtype: bfloat16  # a comment without a source\n")
    missing = [key for _, key, value, comment in leaves(bad) if value is not None and not (comment and LABEL.match(comment))]
    assert missing == ["model", "dtype"]


def test_the_presets_take_azrs_environment():
    cfg = load_config(CONFIGS / "4t4s-7b.yaml")
    t, sp = cfg.tasks, cfg.selfplay
    assert (t.templates, t.prompt_style, t.require_think, t.references, t.seeds.source) == ("azr", "r1", True, 6, "generate")
    assert sp.teacher_sampling.max_new_tokens == sp.student_sampling.max_new_tokens == 8096
    assert cfg.policy.max_prompt_tokens == 6144 and cfg.sandbox.wall_seconds == 10.0 and sp.rollouts == 8


def test_the_sweep_says_which_parts_are_the_papers():
    text = (CONFIGS / "sweeps" / "populations-7b.yaml").read_text()
    assert re.search(r"#.*\bpaper\b", text) and re.search(r"#.*\bours\b", text)
