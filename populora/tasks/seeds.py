"""Seeding the task buffers: AZR's generation with the base model, and the hand-written fallback.

AZR (``azr_ray_trainer.py::_init_seed_dataset``) starts from the identity program and lets the base
model write the seed set: rounds of 64 code_i and code_o proposer prompts, each showing up to 6
seeds found so far, sampled at temperature 1, parsed, executed and kept when valid, until 256
triplets (program, input, output) are found; then, for every seed program, a code_f proposer prompt
until 256 induction tasks are found. ``generate_seed_buffers`` does the same through the
``PolicyBackend.generate`` interface (base model: adapter ``None``) and our validator
(``validate_many``), and reports what it got.

The kinds say who takes part (``populora.tasks.kinds``): the kinds with a ``seed_order`` (AZR's code_i
and code_o) write the shared seed triplets and their buffers start with them; the kinds whose teacher
is given a program (code_f) are then seeded from those programs. Every prompt is the kind's own
question in the seeding template set (``tasks.seeds.templates``, AZR's by default).

A model that cannot write valid programs (``tiny``, random weights) yields too few seeds; then the
hand-written set below is used (with whatever valid seeds were generated). Its varied programs
(strings, lists, dicts, recursion, a class, a helper function, an allowed import) show the first
teacher prompts the range of what is allowed. Outputs are never typed by hand: every seed runs
through the validator, which computes them.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from populora.tasks.azr_templates import format_r1
from populora.tasks.buffers import TaskBuffer, TaskBuffers
from populora.tasks.config import TaskEnv
from populora.tasks.kinds.registry import all_kinds, get_kind
from populora.tasks.parsing import parse_proposal
from populora.tasks.prompts import prefill
from populora.tasks.records import SEED_TEACHER, Proposal, Task, reason_kind, task_id
from populora.tasks.validation import validate_many

# (program, input)
SEED_PROGRAMS: tuple[tuple[str, str], ...] = (
    ("def f(a):\n    return a", "'Hello world'"),
    (
        "def f(s: str) -> str:\n"
        "    out = []\n"
        "    for i, ch in enumerate(s):\n"
        "        out.append(ch.upper() if i % 2 == 0 else ch.lower())\n"
        "    return ''.join(out)",
        "'population'",
    ),
    (
        "def f(nums):\n"
        "    best = cur = nums[0]\n"
        "    for x in nums[1:]:\n"
        "        cur = max(x, cur + x)\n"
        "        best = max(best, cur)\n"
        "    return best",
        "[2, -5, 3, 4, -1, 2, -7, 1]",
    ),
    (
        "def f(words):\n"
        "    counts = {}\n"
        "    for w in words:\n"
        "        counts[len(w)] = counts.get(len(w), 0) + 1\n"
        "    return sorted(counts.items())",
        "['ant', 'bee', 'wasp', 'moth', 'beetle']",
    ),
    (
        "def f(n):\n    if n < 2:\n        return n\n    return f(n - 1) + f(n - 2)",
        "12",
    ),
    (
        "class Stack:\n"
        "    def __init__(self):\n"
        "        self.items = []\n"
        "    def push(self, x):\n"
        "        self.items.append(x)\n"
        "    def pop(self):\n"
        "        return self.items.pop()\n"
        "\n"
        "def f(expr):\n"
        "    pairs = {')': '(', ']': '['}\n"
        "    st = Stack()\n"
        "    for ch in expr:\n"
        "        if ch in '([':\n"
        "            st.push(ch)\n"
        "        elif ch in pairs:\n"
        "            if not st.items or st.pop() != pairs[ch]:\n"
        "                return False\n"
        "    return not st.items",
        "'([()[]])('",
    ),
    (
        "def digits(n):\n"
        "    return [int(c) for c in str(n)]\n"
        "\n"
        "def f(a, b):\n"
        "    return sum(digits(a)) * len(digits(b)) - b % 7",
        "4096, 123",
    ),
    (
        "from collections import Counter\n"
        "\n"
        "def f(text):\n"
        "    c = Counter(text.replace(' ', ''))\n"
        "    return sorted(c.most_common(), key=lambda kv: (-kv[1], kv[0]))[:3]",
        "'the quick brown fox'",
    ),
    (
        "def f(matrix):\n    return [list(row) for row in zip(*matrix[::-1])]",
        "[[1, 2, 3], [4, 5, 6]]",
    ),
    (
        "def f(s, k):\n"
        "    shifted = []\n"
        "    for ch in s:\n"
        "        if ch.isalpha():\n"
        "            base = ord('a') if ch.islower() else ord('A')\n"
        "            shifted.append(chr((ord(ch) - base + k) % 26 + base))\n"
        "        else:\n"
        "            shifted.append(ch)\n"
        "    return ''.join(shifted)",
        "'Zebra-42', 3",
    ),
    (
        "def f(intervals):\n"
        "    merged = []\n"
        "    for lo, hi in sorted(intervals):\n"
        "        if merged and lo <= merged[-1][1]:\n"
        "            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))\n"
        "        else:\n"
        "            merged.append((lo, hi))\n"
        "    return merged",
        "[(5, 8), (1, 3), (2, 4), (9, 9)]",
    ),
    (
        "def f(graph, start):\n"
        "    seen, order, queue = {start}, [], [start]\n"
        "    while queue:\n"
        "        node = queue.pop(0)\n"
        "        order.append(node)\n"
        "        for nxt in graph.get(node, []):\n"
        "            if nxt not in seen:\n"
        "                seen.add(nxt)\n"
        "                queue.append(nxt)\n"
        "    return order",
        "{'a': ['b', 'c'], 'b': ['d'], 'c': ['d', 'e'], 'e': ['a']}, 'a'",
    ),
    (
        "import math\n"
        "\n"
        "def f(points):\n"
        "    def dist(p):\n"
        "        return math.hypot(p[0], p[1])\n"
        "    return [p for p in sorted(points, key=dist)][:2]",
        "[(3, 4), (1, 1), (-2, 0), (0, 5)]",
    ),
    (
        "def f(n):\n"
        "    steps = 0\n"
        "    while n != 1:\n"
        "        n = n // 2 if n % 2 == 0 else 3 * n + 1\n"
        "        steps += 1\n"
        "    return steps",
        "27",
    ),
)


def seeded_kinds() -> list:
    """The kinds whose buffers start with the shared seed triplets (a ``seed_order``), in the
    registry's order (code_o, code_i): the first is the kind the triplets are validated and kept as
    before they are copied into every seeded kind's buffer."""
    return [k for k in all_kinds().values() if k.seed_order is not None]


def seed_writers() -> list:
    """The same kinds in the order AZR asks their teachers for seed triplets (``seed_order``: code_i,
    then code_o)."""
    return sorted(seeded_kinds(), key=lambda k: k.seed_order)


def seed_proposals(task_type: str) -> list[Proposal]:
    """The hand-written seed programs as proposals of ``task_type`` (a seeding kind), teacher ``seed``."""
    if get_kind(task_type).seed_order is None:
        raise ValueError(f"seed_proposals: {task_type!r} is not seeded with program/input triplets; "
                         f"seeding kinds: {[k.name for k in seeded_kinds()]}")
    return [Proposal(type=task_type, program=p, inputs=(i,), teacher_id=SEED_TEACHER) for p, i in SEED_PROGRAMS]


def seed_buffers(sandbox, env: TaskEnv | None = None) -> TaskBuffers:
    """Buffers holding the validated hand-written seed set, in the buffer of every seeding kind (code_o
    and code_i). Raises if a seed is invalid."""
    env = env or TaskEnv()
    bufs = TaskBuffers(env.buffer_capacity)
    proposals = [p for kind in seeded_kinds() for p in seed_proposals(kind.name)]  # one sandbox batch for all
    for proposal, verdict in zip(proposals, validate_many(proposals, sandbox, env)):
        if not verdict.valid:
            raise RuntimeError(f"seed program is invalid ({verdict.reason}):\n{proposal.program}")
        bufs.add(verdict.task)
    return bufs


# -- generation with the base model, as AZR ---------------------------------------------------------
# AZR's starting point: the identity program and its input (azr_ray_trainer.py:42-43, :1034)
AZR_SEED_PROGRAM = "def f(a):\n    return a"
AZR_SEED_INPUT = '"Hello world"'


@dataclass
class SeedReport:
    """What seeding produced: the buffers, where the seed triplets came from, and counts.

    ``source``: ``generated`` or ``handwritten`` (the fallback, or ``tasks.seeds.source``).
    ``prompts[t]`` / ``valid[t]``: proposer prompts sent and valid new seeds found per task type
    (the seeding kinds share one set of triplets, as in AZR); ``rejected``: rejection reasons by kind.
    """

    buffers: TaskBuffers
    source: str
    rounds: dict[str, int] = field(default_factory=dict)
    prompts: Counter = field(default_factory=Counter)
    valid: Counter = field(default_factory=Counter)
    rejected: Counter = field(default_factory=Counter)

    def as_metrics(self) -> dict[str, float | str]:
        out: dict[str, float | str] = {"seeds/source": self.source}
        out.update({f"seeds/{t}/prompts": n for t, n in self.prompts.items()})
        out.update({f"seeds/{t}/valid": n for t, n in self.valid.items()})
        out.update({f"seeds/rounds/{phase}": n for phase, n in self.rounds.items()})
        out.update({f"seeds/reject/{k}": n for k, n in self.rejected.items()})
        return out


def as_type(task: Task, task_type: str) -> Task:
    """A seed triplet as a task of another seeding kind (AZR feeds one seed set to code_i and code_o)."""
    return dataclasses.replace(task, type=task_type, id=task_id(task_type, task.program, (task.input,)))


def _propose(backend, sampling, prompts: Sequence[tuple[str, str, str | None]], wrap, env: TaskEnv):
    """Generate one completion per ``(task_type, question, program)`` with the base model; parse it as
    AZR's seeding does: the raw response, without requiring answer tags or the think format."""
    from populora.policy.base import GenerationRequest

    read = env.replace(require_answer_tag=False, require_think=False)
    requests = [GenerationRequest(wrap(q) + prefill("teacher", t, env), None) for t, q, _ in prompts]
    results = backend.generate(requests, dataclasses.replace(sampling, n=1))
    out = []
    for (t, _, program), res in zip(prompts, results):
        text = res.completions[0].text if res is not None and res.completions else ""
        out.append(parse_proposal(prefill("teacher", t, env) + text, t, read, program=program,
                                  teacher_id=SEED_TEACHER))
    return out


def _grow(seeds, proposals, validate, report: SeedReport, as_task=lambda task: task) -> None:
    """Validate ``proposals`` and add the valid ones to ``seeds``, counting new seeds and rejections."""
    for proposal, verdict in zip(proposals, validate(proposals)):
        if verdict.valid:
            report.valid[proposal.type] += seeds.add(as_task(verdict.task))
        else:
            report.rejected[reason_kind(verdict.reason) or "unknown"] += 1


def generate_seed_buffers(backend, sandbox, env: TaskEnv, sampling, rng: random.Random, *,
                          wrap: Callable[[str], str] = format_r1) -> SeedReport:
    """Seed the buffers as AZR does: the base model proposes, the validator keeps the valid seeds.

    ``backend``: a ``PolicyBackend`` (generation with adapter ``None``, the bare base model);
    ``env``: the run's task environment (``env.seeds`` says how; K = ``env.references`` seeds shown
    per prompt, AZR ``io_n`` = 6; prompts in ``env.seeds.templates``' set, with the run's answer
    prefill; validation and buffer capacity as in the run); ``sampling``: its ``SamplingParams``, the
    run's teacher sampling (``n`` is forced to 1; AZR's seeding requests went through verl's
    validation settings, i.e. greedy, see docs/tasks.md); ``wrap``: the prompt wrapper (the run's R1
    or chat formatting). Completions are parsed without requiring ``<answer>`` tags, as AZR's
    seeding parses the raw response.

    Phase 1 (the seeding kinds, code_i then code_o): rounds of ``seeds.batch`` prompts per kind, each
    with up to K seeds drawn from those found so far, until ``seeds.target`` seeds or
    ``seeds.max_rounds`` rounds. Fewer than ``seeds.min_valid`` generated seeds: the hand-written set
    is added and ``source`` is ``handwritten``. Phase 2 (the kinds given a program: code_f): one
    prompt per seed program per round (AZR: one program per prompt) until ``seeds.target`` tasks or
    ``seeds.max_rounds`` rounds. Generated sets are cut to ``seeds.target`` (as AZR truncates). A
    generation failure propagates: seeding is the model's first use, and a run whose model cannot
    generate cannot train.
    """
    cfg = env.seeds
    ask = env.replace(templates=cfg.templates)
    report = SeedReport(TaskBuffers(env.buffer_capacity), "handwritten")

    def validate(proposals):
        return validate_many(proposals, sandbox, env)

    seeded = seeded_kinds()
    held = seeded[0].name
    seeds = TaskBuffer(held)  # the shared seed triplets, deduplicated, in order found
    if cfg.source == "generate":
        identity = Proposal(type=held, program=AZR_SEED_PROGRAM, inputs=(AZR_SEED_INPUT,), teacher_id=SEED_TEACHER)
        _grow(seeds, [identity], validate, report)
        report.valid.clear()
        rounds = 0
        while len(seeds) < cfg.target and rounds < cfg.max_rounds:
            rounds += 1
            for kind in seed_writers():
                if len(seeds) >= cfg.target:
                    break
                pool = list(seeds)
                prompts = [(kind.name, kind.teacher_question(rng.sample(pool, min(env.references, len(pool))),
                                                             None, ask), None)
                           for _ in range(cfg.batch)]
                report.prompts[kind.name] += len(prompts)
                _grow(seeds, _propose(backend, sampling, prompts, wrap, env), validate, report,
                      lambda task: as_type(task, held))
        report.rounds["code_io"] = rounds
        if sum(report.valid[kind.name] for kind in seeded) >= cfg.min_valid:
            report.source = "generated"
    if report.source == "generated":
        triplets = list(seeds)[: cfg.target]
    else:  # chosen, or too few generated: the hand-written set (its own identity first), then what the model wrote
        handwritten = seed_proposals(held)
        fallback = TaskBuffer(held)
        for proposal, verdict in zip(handwritten, validate(handwritten)):
            if not verdict.valid:
                raise RuntimeError(f"seed program is invalid ({verdict.reason}):\n{proposal.program}")
            fallback.add(verdict.task)
        fallback.extend(list(seeds)[1:] if cfg.source == "generate" else [])  # the AZR identity left out
        triplets = list(fallback)
    for task in triplets:
        for kind in seeded:
            report.buffers.add(as_type(task, kind.name))

    if cfg.source == "generate":
        for kind in (k for k in all_kinds().values() if k.given_program):
            given = TaskBuffer(kind.name)
            rounds = 0
            while len(given) < cfg.target and rounds < cfg.max_rounds:
                rounds += 1
                prompts = [(kind.name, kind.teacher_question([], t.program, ask), t.program) for t in triplets]
                report.prompts[kind.name] += len(prompts)
                _grow(given, _propose(backend, sampling, prompts, wrap, env), validate, report)
            report.rounds[kind.name] = rounds
            for task in list(given)[: cfg.target]:
                report.buffers.add(task)
    return report
