"""Seeding the buffers as AZR does (the base model writes the seeds) and the hand-written fallback."""

from __future__ import annotations

import random
import re

import pytest

from populora.policy.base import Completion, GenerationResult, SamplingParams
from populora.sandbox import Sandbox, SandboxLimits
from populora.tasks.config import SeedConfig, TaskEnv
from populora.tasks.records import CODE_F, CODE_I, CODE_O
from populora.tasks.seeds import (
    AZR_SEED_INPUT,
    AZR_SEED_PROGRAM,
    SEED_PROGRAMS,
    generate_seed_buffers,
    seed_buffers,
)


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(limits=SandboxLimits(wall_seconds=2.0, cpu_seconds=2), workers=2) as sb:
        yield sb


def _ids(buffer) -> set[str]:
    return {t.id for t in buffer}


class ScriptedBackend:
    """A test double standing in for ``PolicyBackend.generate``: it answers each proposer prompt with a
    program numbered by a counter (valid, every third one a duplicate or broken), so the seeding logic
    can be checked without a model. It records the prompts it was given."""

    def __init__(self):
        self.prompts: list[str] = []
        self.adapters: list[str | None] = []
        self.k = 0

    def generate(self, requests, sampling):
        assert sampling.n == 1
        out = []
        for r in requests:
            self.prompts.append(r.prompt)
            self.adapters.append(r.adapter)
            self.k += 1
            if "Output 10 Inputs" in r.prompt:  # a code_f proposer prompt
                body = "".join(f"```input\n{self.k * 100 + i}\n```\n" for i in range(10)) + "```message\nadds\n```"
            elif self.k % 3 == 0:
                body = "```python\ndef f(x):\n    return x +\n```\n```input\n1\n```"  # a syntax error
            else:
                body = f"```python\ndef f(x):\n    return x * {self.k}\n```\n```input\n{self.k}\n```"
            text = f"plan</think>\n<answer>\n{body}\n</answer>"
            out.append(GenerationResult([1], [Completion([1], text, [0.0], "stop")]))
        return out


def test_generated_seeds_follow_azr(sandbox):
    backend = ScriptedBackend()
    cfg = SeedConfig(target=10, batch=4, max_rounds=5, min_valid=3)
    report = generate_seed_buffers(backend, sandbox, TaskEnv(seeds=cfg, references=6), SamplingParams(temperature=1.0),
                                   random.Random(0))
    assert report.source == "generated"
    assert set(backend.adapters) == {None}  # the bare base model writes the seeds
    # the identity program starts the set; rounds of 4 code_i then 4 code_o prompts until 10 triplets
    code_o, code_i = list(report.buffers[CODE_O]), list(report.buffers[CODE_I])
    assert len(code_o) == len(code_i) == 10  # cut to the target, the same triplets in both buffers
    assert code_o[0].program == AZR_SEED_PROGRAM and code_o[0].input == AZR_SEED_INPUT
    assert [(t.program, t.input, t.output) for t in code_o] == [(t.program, t.input, t.output) for t in code_i]
    assert {t.teacher_id for t in code_o} == {"seed"}
    # round 1: 3 + 3 valid (every third completion is broken), round 2: 2 + 3; 12 found, 10 kept
    assert report.prompts[CODE_I] == report.prompts[CODE_O] == 8
    assert (report.valid[CODE_I], report.valid[CODE_O]) == (5, 6) and report.rejected == {"syntax_error": 5}
    first = backend.prompts[0]
    assert first.startswith("A conversation between User and Assistant.") and first.endswith("Assistant: <think>")
    assert "<snippet_0>" in first and "<snippet_1>" not in first  # only the identity exists at first
    io_prompts = [p for p in backend.prompts if "Output 10 Inputs" not in p]
    assert max(len(re.findall(r"<snippet_\d+>", p)) for p in io_prompts) <= 6  # K = 6 references at most
    # code_f: one program per prompt (AZR's conditioning), 10 inputs each, until 10 tasks
    f_prompts = [p for p in backend.prompts if "Output 10 Inputs" in p]
    assert len(f_prompts) == 10 and all(p.count("```python") == 1 for p in f_prompts)
    code_f = list(report.buffers[CODE_F])
    assert len(code_f) == 10 and all(len(t.inputs) == 10 and t.n_shown == 5 for t in code_f)
    assert {t.program for t in code_f} == {t.program for t in code_o}
    assert report.rounds == {"code_io": 2, "code_f": 1}
    m = report.as_metrics()
    assert m["seeds/source"] == "generated" and m["seeds/code_f/valid"] == 10


def test_handwritten_source_skips_generation(sandbox):
    backend = ScriptedBackend()
    report = generate_seed_buffers(backend, sandbox, TaskEnv(seeds=SeedConfig(source="handwritten")),
                                   SamplingParams(), random.Random(0))
    assert backend.prompts == [] and report.source == "handwritten"
    reference = seed_buffers(sandbox)
    for tt in (CODE_O, CODE_I):
        assert _ids(report.buffers[tt]) == _ids(reference[tt])
    assert len(report.buffers[CODE_F]) == 0


def test_config_errors_name_the_key():
    with pytest.raises(ValueError, match="key 'tasks.seeds.source': must be one of"):
        SeedConfig(source="azr")
    with pytest.raises(ValueError, match="key 'tasks.seeds.batch': must be an integer >= 1, got 0"):
        SeedConfig(batch=0)
    with pytest.raises(ValueError, match="key 'tasks.seeds.templates': 'azr2' is not a template set"):
        TaskEnv(seeds=SeedConfig(templates="azr2"))


@pytest.mark.slow
def test_tiny_model_yields_no_valid_seed_and_falls_back_to_the_handwritten_set(sandbox):
    """``tiny`` has random weights: it writes noise, no proposal is valid, and the 14 programs are used."""
    from populora.policy import make_backend

    backend = make_backend({"model": "tiny", "device": "cpu", "cpu_threads": 1})
    cfg = SeedConfig(target=256, batch=4, max_rounds=2, min_valid=6)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=48, seed=0)
    report = generate_seed_buffers(backend, sandbox, TaskEnv(seeds=cfg), sampling, random.Random(0))
    generated = report.valid[CODE_I] + report.valid[CODE_O]
    print(f"\ntiny: {dict(report.prompts)} prompts, {generated} valid code_i/code_o seeds, "
          f"{report.valid[CODE_F]} code_f; rejected {dict(report.rejected)}; source {report.source}")
    assert generated < cfg.min_valid and report.source == "handwritten"
    assert report.prompts[CODE_I] == report.prompts[CODE_O] == 8 and report.rounds["code_io"] == 2
    assert sum(report.rejected.values()) == 16 + report.prompts[CODE_F] - generated - report.valid[CODE_F]
    reference = seed_buffers(sandbox)
    for tt in (CODE_O, CODE_I):  # every hand-written seed is there (plus any valid generated one)
        assert _ids(reference[tt]) <= _ids(report.buffers[tt])
        assert len(report.buffers[tt]) == len(SEED_PROGRAMS) + generated
    assert report.prompts[CODE_F] == 2 * len(report.buffers[CODE_O])  # one code_f prompt per seed program
