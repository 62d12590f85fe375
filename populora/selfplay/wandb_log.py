"""Weights & Biases as an optional logger beside TensorBoard (``run.wandb: off | offline | online``).

One W&B run per training run, for its whole life: its id is created once and kept in
``RUN_DIR/wandb_id``, and every start of the run (resume after Ctrl-C, SIGUSR2, a requeue) calls
``wandb.init(id=..., resume="allow")``, W&B's own way of continuing a run. W&B writes its files under
``RUN_DIR/wandb/``. The run's resolved config is W&B's config; every step's metrics row is logged at
its step, and the lineage (every birth and replacement) is logged as a table when the run stops.
Project, group and name: ``run.wandb_project`` (default ``populora``), ``run.wandb_group`` and
``run.wandb_name`` (default the config's ``name``); a sweep sets group = sweep and name = run, so a
sweep's runs group together.

``wandb`` is imported only here and only when enabled: training works without it installed, and
asking for it without it is a ConfigError that says how to install it.
"""

from __future__ import annotations

import importlib.util
import json
import math
import secrets
import string
from pathlib import Path

from populora.config import Config, ConfigError, wandb_mode
from populora.run_dir import RunDir

DEFAULT_PROJECT = "populora"
LINEAGE_COLUMNS = ("step", "event", "member", "role", "operator", "parents", "replaced")


def require_wandb(cfg: Config) -> str:
    """The run's W&B mode; a ConfigError when a mode is set and the package is missing."""
    mode = wandb_mode(cfg.run.wandb) or "off"
    if mode != "off" and importlib.util.find_spec("wandb") is None:
        raise ConfigError(f"run.wandb is {mode!r} but the wandb package is not installed: "
                          "pip install 'populora[wandb]' (or wandb), or set run.wandb=off")
    return mode


def new_run_id() -> str:
    """A fresh W&B run id (8 characters of a-z0-9, the form W&B itself makes)."""
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(8))


def run_id(rd: Path, new_id) -> str:
    """The W&B run id of the run in ``rd``: read from ``rd/wandb_id``, or made by ``new_id()`` and stored."""
    path = RunDir(rd).wandb_id_file
    if path.is_file():
        text = path.read_text().strip()
        if text:
            return text
    value = str(new_id())
    tmp = path.with_suffix(".tmp")
    tmp.write_text(value + "\n")
    tmp.replace(path)
    return value


def init_kwargs(cfg: Config, rd: Path, mode: str, wid: str) -> dict:
    """The arguments of ``wandb.init`` for this run (pure: tested without W&B)."""
    from omegaconf import OmegaConf

    return {"project": cfg.run.wandb_project or DEFAULT_PROJECT, "group": cfg.run.wandb_group or None,
            "name": cfg.run.wandb_name or cfg.name, "id": wid, "resume": "allow", "mode": mode, "dir": str(rd),
            "config": OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)}


def scalars(row: dict) -> dict:
    """The finite numbers of a metrics row (W&B charts numbers; ``None`` means no data this step)."""
    return {k: v for k, v in row.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def lineage_rows(events: list[dict]) -> list[list]:
    """One table row per lineage event: step, event, member id, role, operator, parents, replaced."""
    rows = []
    for e in events:
        m = e.get("member") if isinstance(e.get("member"), dict) else {}
        rows.append([e.get("step"), e.get("event"), m.get("id"), m.get("role"), m.get("operator"),
                     json.dumps(m.get("parents", [])), e.get("replaced")])
    return rows


class WandbLog:
    """A metrics sink (``log(step, row)``, ``close()``) writing to the run's one W&B run."""

    def __init__(self, cfg: Config, rd: Path, mode: str) -> None:
        import wandb

        self.rd = rd
        RunDir(rd).wandb_dir.mkdir(exist_ok=True)
        self.id = run_id(rd, new_run_id)
        self._wandb = wandb
        self.run = wandb.init(**init_kwargs(cfg, rd, mode, self.id))

    def log(self, step: int, row: dict) -> None:
        self.run.log(scalars(row), step=step)

    def close(self) -> None:
        try:
            events = RunDir(self.rd).read_lineage(strict=False)
        except ValueError:
            events = []
        if events:
            self.run.log({"lineage": self._wandb.Table(columns=list(LINEAGE_COLUMNS), data=lineage_rows(events))})
        self.run.finish()


def open_wandb(cfg: Config, rd: Path) -> WandbLog | None:
    """The run's W&B logger, or None when ``run.wandb`` is off."""
    mode = require_wandb(cfg)
    return None if mode == "off" else WandbLog(cfg, rd, mode)
