"""Seeding the task buffers: AZR's generation with the base model, and the hand-written fallback.

AZR (``azr_ray_trainer.py::_init_seed_dataset``) starts from the identity program and lets the base
model write the seed set: rounds of 64 code_i and code_o proposer prompts, each showing up to 6
seeds found so far, sampled at temperature 1, parsed, executed and kept when valid, until 256
triplets (program, input, output) are found; then, for every seed program, a code_f proposer prompt
until 256 induction tasks are found. ``generate_seed_buffers`` does the same through the
``PolicyBackend.generate`` interface (base model: adapter ``None``) and our validator
(``validate_many``), and reports what it got.

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

from populora.tasks import azr_templates
from populora.tasks.buffers import SEED_TEACHER, TaskBuffer, TaskBuffers
from populora.tasks.records import CODE_F, CODE_I, CODE_O, Proposal, Task, reason_kind, task_id
from populora.tasks.validation import ValidationConfig, validate_many

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


def seed_proposals(task_type: str = CODE_O) -> list[Proposal]:
    """The seed programs as proposals of ``task_type`` (code_o or code_i), teacher ``seed``."""
    if task_type not in (CODE_O, CODE_I):
        raise ValueError(f"seed_proposals: seeds are code_o/code_i tasks, not {task_type!r}")
    return [Proposal(type=task_type, program=p, inputs=(i,), teacher_id="seed") for p, i in SEED_PROGRAMS]


# -- generation with the base model, as AZR ---------------------------------------------------------
SEED_SOURCES = ("generate", "handwritten")
# AZR's starting point: the identity program and its input (azr_ray_trainer.py:42-43, :1034)
AZR_SEED_PROGRAM = "def f(a):\n    return a"
AZR_SEED_INPUT = '"Hello world"'


@dataclass(frozen=True)
class SeedConfig:
    """How the buffers are seeded at the start of a run.

    ``source``: ``generate`` (AZR: the base model writes the seeds, with the hand-written set as
    the fallback) or ``handwritten`` (the 14 programs above only). ``target`` (AZR: 256 =
    ``data_len`` 64 x ``seed_batch_factor`` 4) seeds of code_i/code_o and as many code_f tasks;
    ``batch`` (AZR: 64, ``data.train_batch_size``) prompts per task type per round. ``max_rounds``
    (ours: AZR loops until the target is met, forever for a model that never writes a valid
    program) bounds each of the two phases. ``min_valid`` (ours): fewer generated valid
    code_i/code_o seeds than this and the hand-written set is used as well.
    """

    source: str = "generate"
    target: int = 256
    batch: int = 64
    max_rounds: int = 16
    min_valid: int = 6

    def __post_init__(self) -> None:
        if self.source not in SEED_SOURCES:
            raise ValueError(f"seeds: source must be one of {SEED_SOURCES}, got {self.source!r}")
        for key in ("target", "batch", "max_rounds", "min_valid"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < (0 if key == "min_valid" else 1):
                raise ValueError(f"seeds: {key} must be an integer >= {0 if key == 'min_valid' else 1}, got {value!r}")


@dataclass
class SeedReport:
    """What seeding produced: the buffers, where the code_i/code_o seeds came from, and counts.

    ``source``: ``generated`` or ``handwritten`` (the fallback, or ``SeedConfig.source``).
    ``prompts[t]`` / ``valid[t]``: proposer prompts sent and valid new seeds found per task type
    (``code_i``/``code_o`` seeds share one set, as in AZR); ``rejected``: rejection reasons by kind.
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
    """A code_i/code_o triplet as a task of the other of the two types (AZR feeds one seed set to both)."""
    return dataclasses.replace(task, type=task_type, id=task_id(task_type, task.program, (task.input,)))


def _propose(backend, sampling, prompts: Sequence[tuple[str, str, str | None]], wrap, prefill, require_answer_tag):
    """Generate one completion per ``(task_type, question, code_f program)`` with the base model; parse it."""
    from populora.policy.base import GenerationRequest
    from populora.tasks.parsing import parse_proposal

    requests = [GenerationRequest(wrap(q) + prefill(t), None) for t, q, _ in prompts]
    results = backend.generate(requests, dataclasses.replace(sampling, n=1))
    out = []
    for (t, _, program), res in zip(prompts, results):
        text = res.completions[0].text if res is not None and res.completions else ""
        out.append(parse_proposal(prefill(t) + text, t, program=program, teacher_id=SEED_TEACHER,
                                  require_answer_tag=require_answer_tag))
    return out


def _grow(seeds, proposals, validate, report: SeedReport, as_task=lambda task: task) -> None:
    """Validate ``proposals`` and add the valid ones to ``seeds``, counting new seeds and rejections."""
    for proposal, verdict in zip(proposals, validate(proposals)):
        if verdict.valid:
            report.valid[proposal.type] += seeds.add(as_task(verdict.task))
        else:
            report.rejected[reason_kind(verdict.reason) or "unknown"] += 1


def generate_seed_buffers(
    backend,
    sandbox,
    cfg: SeedConfig,
    sampling,
    rng: random.Random,
    *,
    references: int = 6,
    wrap: Callable[[str], str] = azr_templates.format_r1,
    prefill: Callable[[str], str] = lambda task_type: "",
    require_answer_tag: bool = False,
    validation: ValidationConfig | None = None,
    capacity: int | None = None,
) -> SeedReport:
    """Seed the buffers as AZR does: the base model proposes, the validator keeps the valid seeds.

    ``backend``: a ``PolicyBackend`` (generation with adapter ``None``, the bare base model);
    ``sampling``: its ``SamplingParams``, the run's teacher sampling (``n`` is forced to 1; AZR's
    seeding requests went through verl's validation settings, i.e. greedy, see docs/tasks.md); ``references``:
    K seeds shown per code_i/code_o prompt (AZR ``io_n`` = 6); ``wrap``: the prompt wrapper (the
    run's R1 or chat formatting); ``prefill(task_type)``: text appended to the prompt and prepended to
    the completion (``tasks.answer_prefill``). Completions are parsed without requiring ``<answer>``
    tags by default, as AZR's seeding parses the raw response. ``validation``: the run's
    ``ValidationConfig`` (its ``code_f_inputs`` is the number of inputs a code_f prompt asks for).

    Phase 1 (code_i, code_o): rounds of ``cfg.batch`` prompts per type, each with up to K seeds
    drawn from those found so far, until ``cfg.target`` seeds or ``cfg.max_rounds`` rounds. Fewer
    than ``cfg.min_valid`` generated seeds: the hand-written set is added and ``source`` is
    ``handwritten``. Phase 2 (code_f): one prompt per seed program per round (AZR: one program per
    prompt) until ``cfg.target`` code_f tasks or ``cfg.max_rounds`` rounds. Generated sets are cut
    to ``cfg.target`` (as AZR truncates). A generation failure propagates: seeding is the model's
    first use, and a run whose model cannot generate cannot train.
    """
    vcfg = validation or ValidationConfig()
    report = SeedReport(TaskBuffers(capacity), "handwritten")

    def validate(proposals):
        return validate_many(proposals, sandbox, vcfg)

    seeds = TaskBuffer(CODE_O)  # the shared code_i/code_o seed triplets, deduplicated, in order found
    if cfg.source == "generate":
        identity = Proposal(type=CODE_O, program=AZR_SEED_PROGRAM, inputs=(AZR_SEED_INPUT,), teacher_id=SEED_TEACHER)
        _grow(seeds, [identity], validate, report)
        report.valid.clear()
        rounds = 0
        while len(seeds) < cfg.target and rounds < cfg.max_rounds:
            rounds += 1
            for tt, template in ((CODE_I, azr_templates.teacher_code_i), (CODE_O, azr_templates.teacher_code_o)):
                if len(seeds) >= cfg.target:
                    break
                pool = list(seeds)
                prompts = [(tt, template(rng.sample(pool, min(references, len(pool)))), None)
                           for _ in range(cfg.batch)]
                report.prompts[tt] += len(prompts)
                _grow(seeds, _propose(backend, sampling, prompts, wrap, prefill, require_answer_tag), validate,
                      report, lambda task: as_type(task, CODE_O))
        report.rounds["code_io"] = rounds
        if report.valid[CODE_I] + report.valid[CODE_O] >= cfg.min_valid:
            report.source = "generated"
    if report.source == "generated":
        triplets = list(seeds)[: cfg.target]
    else:  # chosen, or too few generated: the hand-written set (its own identity first), then what the model wrote
        handwritten = seed_proposals(CODE_O)
        fallback = TaskBuffer(CODE_O)
        for proposal, verdict in zip(handwritten, validate(handwritten)):
            if not verdict.valid:
                raise RuntimeError(f"seed program is invalid ({verdict.reason}):\n{proposal.program}")
            fallback.add(verdict.task)
        fallback.extend(list(seeds)[1:] if cfg.source == "generate" else [])  # the AZR identity left out
        triplets = list(fallback)
    for task in triplets:
        report.buffers.add(as_type(task, CODE_O))
        report.buffers.add(as_type(task, CODE_I))

    if cfg.source == "generate":
        code_f = TaskBuffer(CODE_F)
        rounds = 0
        while len(code_f) < cfg.target and rounds < cfg.max_rounds:
            rounds += 1
            prompts = [(CODE_F, azr_templates.teacher_code_f(t.program, vcfg.code_f_inputs), t.program)
                       for t in triplets]
            report.prompts[CODE_F] += len(prompts)
            _grow(code_f, _propose(backend, sampling, prompts, wrap, prefill, require_answer_tag), validate, report)
        report.rounds["code_f"] = rounds
        for task in list(code_f)[: cfg.target]:
            report.buffers.add(task)
    return report
