"""Progress of every job of a sweep, read from Slurm accounting (``sacct``), as a table.

``sacct -X`` reports one line per job or array task; array tasks that have not started yet are
collapsed into one line such as ``123_[2-5%8]``, which is expanded here so every task of the
manifest gets a state. Sweeps run on the ``local``/``debug`` executors have no accounting: their
final states are the ones recorded in the manifest when they finished.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL",
            "DEADLINE", "PREEMPTED")
SACCT_FIELDS = ("JobID", "State", "ExitCode", "Elapsed")


class AccountingError(RuntimeError):
    """``sacct`` is missing or failed (accounting disabled, no cluster)."""


def expand_job_id(job_id: str) -> list[str]:
    """``123_[0-2,5%4]`` -> ``123_0 123_1 123_2 123_5``; other ids unchanged."""
    m = re.fullmatch(r"(\d+)_\[([^\]]+)\]", job_id)
    if not m:
        return [job_id]
    base, body = m.group(1), m.group(2).split("%")[0]
    out = []
    for part in body.split(","):
        lo, _, hi = part.partition("-")
        out += [f"{base}_{i}" for i in range(int(lo), int(hi or lo) + 1)]
    return out


def parse_sacct(text: str) -> dict[str, dict[str, str]]:
    """Rows of ``sacct -n -P -X -o JobID,State,ExitCode,Elapsed`` by (expanded) job id. Later rows win:
    a requeued job appears once per attempt, the last one is current."""
    states: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) < len(SACCT_FIELDS):
            continue
        row = dict(zip(SACCT_FIELDS, fields))
        row["State"] = row["State"].split()[0]  # "CANCELLED by 0" -> "CANCELLED"
        for jid in expand_job_id(row["JobID"]):
            states[jid] = row
    return states


def sacct(job_ids: Iterable[str]) -> dict[str, dict[str, str]]:
    ids = sorted({str(j).split("_")[0] for j in job_ids})
    if not ids:
        return {}
    cmd = ["sacct", "-n", "-P", "-X", "-D", "-j", ",".join(ids), "-o", ",".join(SACCT_FIELDS)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except FileNotFoundError as exc:
        raise AccountingError("sacct not found: sweep status needs Slurm accounting (slurmdbd)") from exc
    if proc.returncode != 0:
        raise AccountingError(f"`{' '.join(cmd)}` failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return parse_sacct(proc.stdout)


def status_rows(manifest: dict[str, Any]) -> list[dict[str, str]]:
    """One row per task of every stage: stage, task, job id, state, exit code, elapsed."""
    task_ids = [t["job_id"] for st in manifest["stages"] for t in st["tasks"]]
    slurm = any(st.get("executor", "slurm") == "slurm" for st in manifest["stages"])
    states = sacct(task_ids) if slurm else {}
    rows = []
    for st in manifest["stages"]:
        for task in st["tasks"]:
            info = states.get(task["job_id"], {})
            state = info.get("State") or task.get("state") or ("UNKNOWN" if slurm else "NOT RECORDED")
            rows.append({"stage": st["key"], "task": task["label"], "job_id": task["job_id"], "state": state,
                         "exit": info.get("ExitCode", ""), "elapsed": info.get("Elapsed", "")})
    return rows


def format_table(rows: Sequence[dict[str, str]]) -> str:
    cols = ("stage", "task", "job_id", "state", "exit", "elapsed")
    widths = {c: max([len(c), *(len(r[c]) for r in rows)]) for c in cols}
    lines = ["  ".join(c.upper().ljust(widths[c]) for c in cols).rstrip()]
    lines += ["  ".join(r[c].ljust(widths[c]) for c in cols).rstrip() for r in rows]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    lines.append(f"{len(rows)} task(s): " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    return "\n".join(lines)


def finished(rows: Sequence[dict[str, str]]) -> bool:
    return all(r["state"] in TERMINAL for r in rows)


def wait(manifest_reader, timeout_s: float, poll_s: float = 5.0) -> list[dict[str, str]]:
    """Poll until every task is in a terminal state; ``TimeoutError`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        rows = status_rows(manifest_reader())
        if finished(rows):
            return rows
        if time.monotonic() > deadline:
            raise TimeoutError(f"sweep not finished after {timeout_s:.0f} s:\n{format_table(rows)}")
        time.sleep(poll_s)


def status_of(sweep_dir: str | Path) -> list[dict[str, str]]:
    from jobs.sweep import read_manifest

    return status_rows(read_manifest(sweep_dir))
