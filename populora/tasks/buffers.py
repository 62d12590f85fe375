"""Per-type task buffers: where valid tasks go, and where teachers' reference tasks come from.

Each task type has its own buffer. A buffer

- deduplicates tasks by normalised program (``ast.unparse``: comments and layout do not make a new
  task) plus inputs compared by value (``"1,[2]"`` equals ``"1, [2]"``);
- holds at most ``capacity`` tasks (None: unbounded, as in AZR); when full, the oldest non-seed task
  leaves first, so the hand-written seeds stay as references;
- samples K reference tasks without replacement from a caller-seeded ``random.Random``.

How the buffers start is ``seeds.py``'s (``generate_seed_buffers``, ``seed_buffers``).
"""

from __future__ import annotations

import ast
import random
from collections.abc import Iterable, Iterator
from typing import Any

from populora.tasks.kinds.registry import all_kinds, get_kind, kind_names
from populora.tasks.records import SEED_TEACHER, Task
from populora.tasks.values import input_key


def normalise_program(program: str) -> str:
    """The program with comments and layout normalised (its text if it does not parse)."""
    try:
        return ast.unparse(ast.parse(program))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return program.strip()


def dedup_key(task: Task) -> tuple[Any, ...]:
    """Two tasks with equal keys are the same task for the buffer."""
    inputs = get_kind(task.type).dedup_inputs(task)
    return (task.type, normalise_program(task.program), tuple(input_key(i) for i in inputs))


def _rng(rng: random.Random | int | None) -> random.Random:
    return rng if isinstance(rng, random.Random) else random.Random(rng)


class TaskBuffer:
    """The valid tasks of one type, deduplicated, oldest first."""

    def __init__(self, task_type: str, capacity: int | None = None) -> None:
        if task_type not in kind_names():
            raise ValueError(f"TaskBuffer: unknown task type {task_type!r}")
        if capacity is not None and capacity < 1:
            raise ValueError(f"TaskBuffer: capacity must be >= 1 or None, got {capacity!r}")
        self.task_type = task_type
        self.capacity = capacity
        self._tasks: list[Task] = []
        self._keys: set[tuple[Any, ...]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[Task]:
        return iter(list(self._tasks))

    def __contains__(self, task: Task) -> bool:
        return dedup_key(task) in self._keys

    def add(self, task: Task) -> bool:
        """Add ``task``; False when it is a duplicate. Evicts the oldest non-seed task when full."""
        if task.type != self.task_type:
            raise ValueError(f"TaskBuffer({self.task_type}): cannot hold a {task.type} task ({task.id})")
        key = dedup_key(task)
        if key in self._keys:
            return False
        self._tasks.append(task)
        self._keys.add(key)
        if self.capacity is not None and len(self._tasks) > self.capacity:
            victim = next((t for t in self._tasks if t.teacher_id != SEED_TEACHER), self._tasks[0])
            self._tasks.remove(victim)
            self._keys.discard(dedup_key(victim))
        return True

    def discard(self, ids: Iterable[str]) -> int:
        """Remove the tasks with these ids (a task found nondeterministic); the number removed."""
        ids = set(ids)
        gone = [t for t in self._tasks if t.id in ids]
        for t in gone:
            self._tasks.remove(t)
            self._keys.discard(dedup_key(t))
        return len(gone)

    def extend(self, tasks: Iterable[Task]) -> int:
        """Add every task; the number actually added."""
        return sum(self.add(t) for t in tasks)

    def sample(self, k: int, rng: random.Random | int | None = None) -> list[Task]:
        """``min(k, len(self))`` distinct tasks chosen uniformly by ``rng`` (a Random or a seed)."""
        if k < 0:
            raise ValueError(f"TaskBuffer.sample: k must be >= 0, got {k}")
        return _rng(rng).sample(self._tasks, min(k, len(self._tasks)))

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.task_type,
            "capacity": self.capacity,
            "tasks": [t.to_json() for t in self._tasks],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskBuffer:
        buf = cls(data["type"], data.get("capacity"))
        for t in data.get("tasks", []):
            buf.add(Task.from_json(t))
        return buf


class TaskBuffers:
    """One ``TaskBuffer`` per task type."""

    def __init__(self, capacity: int | None = None) -> None:
        self.by_type = {t: TaskBuffer(t, capacity) for t in kind_names()}

    def __getitem__(self, task_type: str) -> TaskBuffer:
        if task_type not in self.by_type:
            raise KeyError(f"no buffer for task type {task_type!r}")
        return self.by_type[task_type]

    def add(self, task: Task) -> bool:
        return self[task.type].add(task)

    def discard(self, ids: Iterable[str]) -> int:
        """Remove the tasks with these ids from every buffer; the number removed."""
        ids = set(ids)
        return sum(b.discard(ids) for b in self.by_type.values())

    def references(self, task_type: str, k: int = 6, rng: random.Random | int | None = None) -> list[Task]:
        """K reference tasks for a teacher prompt of ``task_type``."""
        return self[task_type].sample(k, rng)

    def sample_program(self, rng: random.Random | int | None = None) -> str:
        """A program for a teacher who is given one (code_f), from the buffers of the kinds whose
        programs may be given (``program_source``: code_o and code_i, as AZR)."""
        sources = [name for name, kind in all_kinds().items() if kind.program_source]
        programs = sorted({t.program for name in sources for t in self[name]})
        if not programs:
            raise ValueError(f"sample_program: the {' and '.join(sources)} buffers are empty; seed them first")
        return _rng(rng).choice(programs)

    def to_json(self) -> dict[str, Any]:
        return {t: b.to_json() for t, b in self.by_type.items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskBuffers:
        bufs = cls()
        for t in kind_names():
            if t in data:
                bufs.by_type[t] = TaskBuffer.from_json(data[t])
        return bufs

