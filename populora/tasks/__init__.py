"""The AZR task environment: records, prompts, parsing, AST safety check, validation, checking, rewards.

See ``docs/tasks.md``. Nothing here executes model text in the calling process: programs run only in
the sandbox (``populora.sandbox``), and values are read with ``ast.literal_eval``. Every stage takes
the run's task environment, ``TaskEnv`` (the ``tasks:`` section of a run config, ``config.py``).
"""

from populora.tasks.buffers import TaskBuffer, TaskBuffers
from populora.tasks.checking import check_many, to_attempt
from populora.tasks.config import SeedConfig, TaskEnv
from populora.tasks.kinds import Judgement, TaskKind, all_kinds, get_kind, kind_names
from populora.tasks.parsing import parse_proposal, parse_student_answer
from populora.tasks.prompts import format_chat, format_r1, student_prompt, teacher_prompt
from populora.tasks.records import CODE_F, CODE_I, CODE_O, Attempt, Proposal, Task, Verdict
from populora.tasks.rewards import solve_rate, student_reward, teacher_reward
from populora.tasks.safety import SafetyConfig, check_program
from populora.tasks.seeds import seed_buffers
from populora.tasks.validation import validate_many
from populora.tasks.values import read_literal, values_equal

__all__ = [
    "CODE_F",
    "CODE_I",
    "CODE_O",
    "Attempt",
    "Judgement",
    "Proposal",
    "SafetyConfig",
    "SeedConfig",
    "Task",
    "TaskBuffer",
    "TaskBuffers",
    "TaskEnv",
    "TaskKind",
    "Verdict",
    "all_kinds",
    "check_many",
    "check_program",
    "format_chat",
    "format_r1",
    "get_kind",
    "kind_names",
    "parse_proposal",
    "parse_student_answer",
    "read_literal",
    "seed_buffers",
    "solve_rate",
    "student_prompt",
    "student_reward",
    "teacher_prompt",
    "teacher_reward",
    "to_attempt",
    "validate_many",
    "values_equal",
]
