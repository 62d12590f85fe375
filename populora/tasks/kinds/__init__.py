"""Task kinds: AZR's task types as objects behind one interface (``base.TaskKind``), one module each
(``code_o``, ``code_i``, ``code_f``, and ``code_e``, off by default), found by ``get_kind(name)``.
See docs/tasks.md."""

from populora.tasks.kinds.base import CheckRun, Judgement, TaskKind, Templates
from populora.tasks.kinds.registry import all_kinds, default_kind_names, get_kind, kind_names, register_kind

__all__ = ["CheckRun", "Judgement", "TaskKind", "Templates", "all_kinds", "default_kind_names", "get_kind",
           "kind_names", "register_kind"]
