"""Generation for many adapters in one engine, saved as resumable JSONL, split into shards.

The unit of work is ``(adapter, benchmark, slice)``: a slice is ``slice_size`` consecutive items
of a benchmark. ``plan_units`` lists all units in a fixed order and ``--shard i/N`` takes units
``k`` with ``k % N == i``. A shard generates for all its pending (adapter, item) pairs of one
benchmark in mixed-adapter batches (``PolicyBackend.generate`` with one request per pair, each naming
its adapter; ``None`` is the base model), with the evaluation's decoding (``eval.runner.decoding``: greedy, or
``N`` seeded samples per request, all in the same call), and appends each finished chunk to
``<root>/shards/<i>-of-<N>/<adapter>/<benchmark>.jsonl`` (one record per item and sample: prompt,
completion, sample number and metadata), flushed and fsynced. Re-running a shard skips the samples
already in its files (an item with some samples missing is generated again and only the missing
ones are kept: seeded sampling draws the same ones), and a truncated last line (a crash mid-write)
is dropped, so an interrupted evaluation resumes where it stopped.

Requests per ``generate`` call (``chunk_size``): 0 submits every pending request of a benchmark
at once (what the vLLM engine wants: it schedules them itself, and a call never waits for the
slowest greedy sequence of a small chunk); the HF engine gets one decode batch per call, so an
interrupted evaluation loses at most one batch. Stop strings (and, for engines that take them,
stop token ids) come from the benchmark family (``eval.benchmarks.prompts.stop_strings``).

``<root>/plan.json`` fixes adapters, benchmarks, item ids, template, decoding, token budgets, stop
strings and shard count; every shard checks it, and ``merge`` combines the shards into
``<root>/merged/``, refusing missing or duplicated records (every item must have every sample).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from eval.benchmarks import Item
from eval.benchmarks.prompts import build_prompt
from eval.runner.decoding import Decoding, request_index
from eval.runner.runs import EvalAdapter


class ShardError(RuntimeError):
    """Shards are incomplete, duplicated or made with other settings than the plan."""


@dataclass(frozen=True)
class WorkUnit:
    adapter: str  # EvalAdapter.key
    benchmark: str
    slice_index: int
    item_ids: tuple[str, ...]


def parse_shard(text: str) -> tuple[int, int]:
    """``"2/8"`` -> ``(2, 8)`` (0-based index)."""
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard must look like i/N (e.g. 0/4), got {text!r}") from None
    if not (n >= 1 and 0 <= i < n):
        raise ValueError(f"--shard {text}: need 0 <= i < N")
    return i, n


def plan_units(adapters: Sequence[str], item_ids: Mapping[str, Sequence[str]], slice_size: int) -> list[WorkUnit]:
    """Every (adapter, benchmark, slice) unit in a fixed order (benchmark, slice, adapter)."""
    units = []
    for bench, ids in item_ids.items():
        for s in range(0, len(ids), slice_size):
            for a in adapters:
                units.append(WorkUnit(a, bench, s // slice_size, tuple(ids[s : s + slice_size])))
    return units


def shard_units(units: Sequence[WorkUnit], index: int, count: int) -> list[WorkUnit]:
    return [u for k, u in enumerate(units) if k % count == index]


def shard_dir(root: Path, index: int, count: int) -> Path:
    return root / "shards" / f"{index:03d}-of-{count:03d}"


# -- resumable JSONL --------------------------------------------------------------------------------
def read_records(path: Path, repair: bool = False) -> list[dict]:
    """Records of a generation file; a truncated last line is dropped (and cut off with ``repair``)."""
    if not path.is_file():
        return []
    data = path.read_bytes()
    records, good_end = [], 0
    for line in data.splitlines(keepends=True):
        try:
            if not line.endswith(b"\n"):
                raise ValueError("no newline: interrupted write")
            records.append(json.loads(line))
            good_end += len(line)
        except ValueError:
            if good_end + len(line) < len(data):
                raise ShardError(f"{path}: corrupt record in the middle of the file (byte {good_end})") from None
            if repair:
                with open(path, "r+b") as f:
                    f.truncate(good_end)
            break
    return records


def append_records(path: Path, records: Sequence[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        for r in records:
            f.write((json.dumps(r, ensure_ascii=False) + "\n").encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())


# -- the plan -------------------------------------------------------------------------------------
def write_or_check_plan(root: Path, plan: dict) -> dict:
    """Write ``plan.json`` or check that an existing one has the same settings (names the key)."""
    path = root / "plan.json"
    if path.is_file():
        old = json.loads(path.read_text())
        for key in plan:
            if old.get(key) != plan[key]:
                raise ShardError(
                    f"{path}: {key} differs from this invocation ({plan_difference(old.get(key), plan[key])}); "
                    "give another --workdir, or the same settings"
                )
        return old
    root.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(plan, indent=1) + "\n")
    os.replace(tmp, path)
    return plan


def plan_difference(old, new, width: int = 80) -> str:
    """A short account of how a plan value changed: the keys added / removed / changed of a mapping,
    else both values, each cut to ``width`` characters (a plan holds item lists of any length)."""
    def cut(v, text: str | None = None) -> str:
        text = repr(v) if text is None else text
        return text if len(text) <= width else text[: width - 3] + "..."

    if isinstance(old, dict) and isinstance(new, dict):
        parts = []
        for label, keys in (("added", [k for k in new if k not in old]), ("removed", [k for k in old if k not in new]),
                            ("changed", [k for k in new if k in old and old[k] != new[k]])):
            if keys:
                parts.append(f"{label}: {cut(None, ', '.join(map(str, keys)))}")
        return "; ".join(parts) or "reordered"
    if isinstance(old, list) and isinstance(new, list):
        return f"{len(old)} planned, {len(new)} now"
    return f"planned {cut(old)}, now {cut(new)}"


def make_plan(adapters: Sequence[EvalAdapter], items: Mapping[str, Sequence[Item]], *, template: str,
              max_new_tokens: Mapping[str, int], shards: int, slice_size: int, model: str,
              stops: Mapping[str, Sequence[str]] | None = None, decoding: Decoding | None = None) -> dict:
    return {
        "model": model,
        "template": template,
        "decoding": (decoding or Decoding()).plan_value(),
        "max_new_tokens": dict(max_new_tokens),
        "stop": {b: list(v) for b, v in (stops or {}).items()},
        "adapters": [a.to_json() for a in adapters],
        "items": {b: [it.item_id for it in its] for b, its in items.items()},
        "shards": shards,
        "slice_size": slice_size,
    }


# -- generation -----------------------------------------------------------------------------------
def generate_shard(
    backend,
    adapters: Sequence[EvalAdapter],
    items: Mapping[str, Sequence[Item]],
    root: Path,
    *,
    template: str,
    max_new_tokens: Mapping[str, int],
    shard: tuple[int, int] = (0, 1),
    slice_size: int = 64,
    chunk_size: int = 64,
    stops: Mapping[str, Sequence[str]] | None = None,
    stop_ids: Sequence[int] = (),
    progress: Callable[[str], None] | None = None,
    decoding: Decoding | None = None,
) -> int:
    """Generate the pending records of one shard; returns how many completions were generated now.

    ``chunk_size`` 0: all pending requests of a benchmark in one call (a request asks for every
    sample of its item). ``stops[bench]``: stop strings; ``stop_ids``: stop token ids, passed when
    the engine's ``SamplingParams`` has ``stop_token_ids``. ``decoding``: greedy by default.
    """
    from populora.policy.base import GenerationRequest, SamplingParams

    decoding = decoding or Decoding()
    index, count = shard
    out_dir = shard_dir(root, index, count)
    by_id = {b: {it.item_id: it for it in its} for b, its in items.items()}
    units = shard_units(plan_units([a.key for a in adapters], {b: list(by_id[b]) for b in items}, slice_size), index, count)
    adapter_of = {a.key: a for a in adapters}
    done = 0
    for bench in items:
        pending: list[tuple[str, str]] = []
        have: dict[tuple[str, str], set[int]] = {}
        for u in (u for u in units if u.benchmark == bench):
            for r in read_records(out_dir / u.adapter / f"{bench}.jsonl", repair=True):
                have.setdefault((u.adapter, r["item_id"]), set()).add(r.get("sample", 0))
            pending.extend((u.adapter, i) for i in u.item_ids if len(have.get((u.adapter, i), ())) < decoding.samples)
        # item-major order: consecutive requests belong to different adapters -> mixed batches
        order = {i: n for n, i in enumerate(by_id[bench])}
        pending.sort(key=lambda p: (order[p[1]], p[0]))
        sampling = decoding.sampling_params(SamplingParams, int(max_new_tokens[bench]), (stops or {}).get(bench, ()), stop_ids)
        step = chunk_size or max(1, len(pending))
        for start in range(0, len(pending), step):
            chunk = pending[start : start + step]
            prompts = [build_prompt(by_id[bench][i], template, backend.tokenizer) for _, i in chunk]
            requests = [
                GenerationRequest(p, None if adapter_of[a].adapter_dir is None else a, request_index(bench, i))
                for p, (a, i) in zip(prompts, chunk)
            ]
            results = backend.generate(requests, sampling)
            per_file: dict[str, list[dict]] = {}
            for (a, i), prompt, res in zip(chunk, prompts, results):
                for j in range(decoding.samples):
                    if j in have.get((a, i), ()):
                        continue  # kept from an interrupted run (the same seeded draw)
                    if len(res.completions) > j:
                        c = res.completions[j]
                        text, finish, tokens = c.text, c.finish_reason, len(c.token_ids)
                    else:  # refused on its own (a prompt over policy.max_prompt_tokens): scored as no answer
                        text, finish, tokens = "", f"refused:{res.refused}", 0
                    per_file.setdefault(a, []).append({
                        "adapter": a, "benchmark": bench, "item_id": i, "sample": j, "prompt": prompt,
                        "completion": text, "finish_reason": finish, "completion_tokens": tokens,
                        "template": template, "max_new_tokens": sampling.max_new_tokens, "stop": list(sampling.stop),
                        "shard": f"{index}/{count}",
                    })
                    done += 1
            for a, recs in per_file.items():
                append_records(out_dir / a / f"{bench}.jsonl", recs)
            if progress:
                each = f" x {decoding.samples} samples" if decoding.samples > 1 else ""
                progress(f"{bench}: {min(start + step, len(pending))}/{len(pending)} requests{each} generated "
                         f"(shard {index}/{count})")
    return done


def sampling_params(cls, max_new_tokens: int, stop: Sequence[str], stop_ids: Sequence[int]):
    """Greedy sampling params; stop token ids only where the engine's params type has the field."""
    return Decoding().sampling_params(cls, max_new_tokens, stop, stop_ids)


def merge(root: Path) -> Path:
    """Combine all shards of ``root`` into ``root/merged``; refuse missing or duplicated records."""
    plan = json.loads((root / "plan.json").read_text())
    count = plan["shards"]
    present = sorted(p.name for p in (root / "shards").glob("*")) if (root / "shards").is_dir() else []
    expected = [shard_dir(root, i, count).name for i in range(count)]
    stray = sorted(set(present) - set(expected))
    if stray:
        raise ShardError(f"{root / 'shards'}: shard directories {stray} do not belong to a {count}-shard plan")
    samples = Decoding.from_json(plan.get("decoding")).samples
    merged = root / "merged"
    problems: list[str] = []
    outputs: dict[tuple[str, str], list[dict]] = {}
    for a in (x["key"] for x in plan["adapters"]):
        for bench, ids in plan["items"].items():
            seen: dict[tuple[str, int], dict] = {}
            for i in range(count):
                for r in read_records(shard_dir(root, i, count) / a / f"{bench}.jsonl"):
                    key = (r["item_id"], r.get("sample", 0))
                    if key in seen:
                        problems.append(f"duplicated: {a}/{bench}/{key[0]}" + (f" sample {key[1]}" if samples > 1 else "")
                                        + f" (shard {i} and {seen[key]['shard']})")
                    seen[key] = r
            missing = [i for i in ids if any((i, j) not in seen for j in range(samples))]
            if missing:
                what = "items" if samples == 1 else f"items (of {samples} samples each)"
                problems.append(f"incomplete: {a}/{bench} lacks {len(missing)} of {len(ids)} {what} (first: {missing[0]})")
            outputs[(a, bench)] = [seen[(i, j)] for i in ids for j in range(samples) if (i, j) in seen]
    if problems:
        raise ShardError(f"cannot merge {root}: " + "; ".join(problems[:10]) + (" ..." if len(problems) > 10 else ""))
    for (a, bench), recs in outputs.items():
        path = merged / a / f"{bench}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs))
        os.replace(tmp, path)
    return merged


def load_merged(root: Path, adapter: str, bench: str) -> dict[str, dict]:
    """The first sample's record of every item (the greedy evaluation's only one)."""
    return {i: recs[0] for i, recs in load_merged_samples(root, adapter, bench).items()}


def load_merged_samples(root: Path, adapter: str, bench: str) -> dict[str, list[dict]]:
    """Every item's records, in sample order."""
    path = root / "merged" / adapter / f"{bench}.jsonl"
    if not path.is_file():
        raise ShardError(f"{path}: missing; run the merge step first")
    out: dict[str, list[dict]] = {}
    for r in sorted(read_records(path), key=lambda r: r.get("sample", 0)):
        out.setdefault(r["item_id"], []).append(r)
    return out
