"""Which adapters a run has, as the evaluation sees them (the run directory's files are read through
``populora.run_dir.RunDir``, which owns the layout).

Contract (``read_run``): a run directory ``runs/<name>/`` holds ``members.json``, a JSON list of
``{"id": str, "role": "teacher" | "student" | "baseline", "adapter_dir": str}``; ``adapter_dir`` is
a PEFT adapter directory, relative to the run directory (or absolute). The single-agent baseline
run lists its one adapter with role ``baseline``. The run's name is the directory name.

The bare base model is not part of any run; the evaluation adds it as ``EvalAdapter.base()``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from populora.run_dir import RunDir

ROLES = ("teacher", "student", "baseline")
BASE_KEY = "base"


@dataclass(frozen=True)
class EvalAdapter:
    """One thing to evaluate: an adapter of a run, or the base model (``adapter_dir is None``)."""

    run: str
    member_id: str
    role: str  # teacher | student | baseline | base
    adapter_dir: Path | None

    @property
    def key(self) -> str:
        """Unique, filesystem- and engine-safe name: ``<run>__<member>`` or ``base``."""
        if self.adapter_dir is None:
            return BASE_KEY
        return re.sub(r"[^A-Za-z0-9_-]", "-", f"{self.run}__{self.member_id}")

    @classmethod
    def base(cls) -> EvalAdapter:
        return cls("-", BASE_KEY, "base", None)

    def to_json(self) -> dict:
        return {"key": self.key, "run": self.run, "member_id": self.member_id, "role": self.role,
                "adapter_dir": str(self.adapter_dir) if self.adapter_dir else None}


def read_run(run_dir: str | Path) -> list[EvalAdapter]:
    """The adapters listed in ``<run_dir>/members.json`` (see the module docstring)."""
    run = RunDir(run_dir)
    run_dir, path = run.path, run.members_file
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing; a run directory lists its adapters in members.json")
    members = run.read_members()  # RunDirError (a ValueError) naming the file when it is not a JSON list
    if not members:
        raise ValueError(f"{path}: expected a non-empty JSON list of members")
    out = []
    for n, m in enumerate(members):
        for key in ("id", "role", "adapter_dir"):
            if not isinstance(m, dict) or key not in m:
                raise ValueError(f"{path}: member #{n} lacks key {key!r}")
        if m["role"] not in ROLES:
            raise ValueError(f"{path}: member {m['id']!r} has role {m['role']!r} (expected one of {ROLES})")
        adir = Path(m["adapter_dir"])
        adir = adir if adir.is_absolute() else run_dir / adir
        if not (adir / "adapter_config.json").is_file():
            raise FileNotFoundError(f"{path}: member {m['id']!r}: {adir} is not a PEFT adapter directory")
        out.append(EvalAdapter(run_dir.name, str(m["id"]), m["role"], adir))
    keys = [a.key for a in out]
    if len(set(keys)) != len(keys):
        raise ValueError(f"{path}: duplicated member ids")
    return out


def run_info(run_dir: str | Path) -> dict:
    """What the leaderboard's provenance says about a run: its training state, config hash, seed and
    population, and per member the step it was born at, the operator that made it, and its LoRA rank
    and alpha.

    Reads ``summary.json`` and ``config.yaml`` when the run has them (a run assembled by hand may not).
    """
    import hashlib

    run = RunDir(run_dir)
    run_dir = run.path
    info: dict = {"steps_done": None, "status": None, "config_sha256": None, "members": {}}
    data = run.read_summary()
    if data is not None:
        info.update(steps_done=data.get("steps_done"), status=data.get("status"), name=data.get("name"))
    if run.config_file.is_file():
        info["config_sha256"] = hashlib.sha256(run.config_file.read_bytes()).hexdigest()
        cfg = run.read_config_data()
        info.update(seed=cfg.get("seed"), population=cfg.get("population"))
    members = run.read_members() if run.members_file.is_file() else []
    for m in members:
        entry = {k: m.get(k) for k in ("born_step", "operator") if k in m}
        adir = Path(m.get("adapter_dir", ""))
        cfg = (adir if adir.is_absolute() else run_dir / adir) / "adapter_config.json"
        if cfg.is_file():
            c = json.loads(cfg.read_text())
            entry.update(rank=c.get("r"), alpha=c.get("lora_alpha"))
        info["members"][str(m.get("id"))] = entry
    return info


def recorded_base_model(adapter: EvalAdapter) -> str | None:
    """The base model an adapter was trained on, as its ``adapter_config.json`` records it (or None)."""
    if adapter.adapter_dir is None:
        return None
    path = adapter.adapter_dir / "adapter_config.json"
    try:
        name = json.loads(path.read_text()).get("base_model_name_or_path")
    except (OSError, json.JSONDecodeError, AttributeError) as e:
        raise ValueError(f"{path}: cannot read the adapter config ({e})") from e
    return name if isinstance(name, str) and name else None


def check_base_model(adapters: list[EvalAdapter], model: str) -> None:
    """ValueError naming the first adapter whose recorded base model is not ``model``.

    A LoRA adapter applied to another base model than the one it was trained on loads without
    complaint when the shapes agree (e.g. an instruct and a base checkpoint), and silently scores
    nonsense. Adapters that record no base model are accepted.
    """
    for a in adapters:
        rec = recorded_base_model(a)
        if rec is not None and rec != model:
            raise ValueError(
                f"{a.adapter_dir / 'adapter_config.json'}: adapter {a.run}/{a.member_id} was trained on base model "
                f"{rec!r}, but --model is {model!r}; pass --model {rec} (or --skip-base-check when both name "
                "the same weights)")


def write_run(run_dir: str | Path, members: list[dict]) -> Path:
    """Write ``members.json`` (used by tests and tools that assemble a run by hand)."""
    run = RunDir(run_dir)
    run.path.mkdir(parents=True, exist_ok=True)
    run.write_members(members)
    return run.members_file


def init_run(run_dir: str | Path, module_shapes: dict, members: list[tuple[str, str]], *, rank: int = 8,
             alpha: float = 16.0, seed: int = 0, b_std: float = 0.02, base_model: str | None = None) -> list[EvalAdapter]:
    """A run of freshly initialised adapters (random B, so members differ): ``members`` is
    ``[(id, role), ...]``; ``base_model`` is recorded in each adapter config. For benchmarks and tests."""
    from populora.policy.adapters import AdapterWeights

    run = RunDir(run_dir)
    listed = []
    for n, (mid, role) in enumerate(members):
        w = AdapterWeights.init(module_shapes, rank, alpha, b_init="random", b_std=b_std, seed=seed * 1000 + n)
        w.save_peft(run.adapter_dir(mid), base_model_name_or_path=base_model)
        listed.append({"id": mid, "role": role, "adapter_dir": f"{RunDir.ADAPTERS}/{mid}"})
    write_run(run_dir, listed)
    return read_run(run_dir)
