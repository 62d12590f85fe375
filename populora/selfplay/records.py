"""Typed records of one self-play step. They grow stage by stage::

    ProposalRecord:  job -> + generation -> + proposal (parsed) -> + verdict -> + reward
    SolveGroup:      (student, task, fresh) -> + generation -> + attempts (checked)
    Seq:             one trainable sequence of a member (its training batch)
    StageError:      a stage the infrastructure failed (the step goes on without its results)

Stages (``stages.py``) are pure functions from records to new records (``dataclasses.replace``);
the loop only wires them. Every record is a plain dataclass of plain values, so ranks can gather
them with torch.distributed's object collectives and tests can build them by hand.
"""

from __future__ import annotations

from dataclasses import dataclass

from populora.policy.base import GenerationResult
from populora.tasks.records import (
    GENERATION_ERROR,
    LIMITS_CHANGED_KIND,
    SANDBOX_ERROR,
    Attempt,
    Proposal,
    Task,
    Verdict,
    reason_kind,
)


@dataclass(frozen=True)
class Seq:
    """One trainable sequence of one adapter."""

    role: str  # teacher | student (the baseline agent has both kinds)
    task_type: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    reward: float
    prompt_group: str  # sequences answering the same prompt share it (per-prompt baselines)


@dataclass(frozen=True)
class StageError:
    """A stage whose infrastructure failed (the sandbox, not a program under test): logged as
    ``errors/<stage>`` (1) and ``errors/<stage>_reason`` (its first 200 characters)."""

    stage: str
    reason: str

    @classmethod
    def of(cls, stage: str, error: BaseException) -> StageError:
        return cls(stage, f"{type(error).__name__}: {str(error)[:200]}")

    def as_metrics(self) -> dict[str, int | str]:
        return {f"errors/{self.stage}": 1, f"errors/{self.stage}_reason": self.reason}


@dataclass(frozen=True)
class ProposalJob:
    """One teacher prompt: who writes, which task type, the question, and the code_f program."""

    member_id: str
    task_type: str
    question: str
    program: str | None = None


@dataclass(frozen=True)
class ProposalRecord:
    """Everything about one teacher proposal of a step; later fields are None until their stage ran.

    ``index`` is the proposal's position in the step (the same on every rank); it names the
    proposal's prompt group (``p<index>``) and seeds its sampling.
    """

    index: int
    job: ProposalJob
    generation: GenerationResult | None = None  # None: not generated yet, or generation failed
    proposal: Proposal | None = None
    verdict: Verdict | None = None
    reward: float | None = None

    @property
    def member_id(self) -> str:
        return self.job.member_id

    @property
    def valid(self) -> bool:
        return self.verdict is not None and self.verdict.valid and self.verdict.task is not None

    @property
    def task(self) -> Task | None:
        return self.verdict.task if self.valid else None


@dataclass(frozen=True)
class SolveGroup:
    """One task attempted by one student with n rollouts (a GRPO-style group).

    ``fresh``: the task was proposed this step by the student's matched teacher (its solve rate is
    the teacher's reward); else it tops the student's budget up from the buffers.
    ``attempts`` holds one checked ``Attempt`` per completion; attempts whose checking failed for
    infrastructure reasons (``infra_error``) are kept for the record but count for nothing.
    """

    index: int
    student_id: str
    task: Task
    fresh: bool
    generation: GenerationResult | None = None
    attempts: tuple[Attempt, ...] = ()

    @property
    def scored(self) -> list[Attempt]:
        """Attempts that were really judged (not lost to an infrastructure error, not on a task found
        nondeterministic)."""
        return [a for a in self.attempts if not is_unjudged(a)]

    @property
    def rho(self) -> float | None:
        """Solve rate: the mean score of the judged attempts, None when there is none."""
        scored = self.scored
        return sum(a.score for a in scored) / len(scored) if scored else None


INFRA_ERRORS = (SANDBOX_ERROR, GENERATION_ERROR)
# the task's own program no longer gave its gold outputs when run again at the check: the answer
# cannot be judged (checking.check_and_rerun); the teacher gets the invalid reward
TASK_NONDETERMINISTIC = "task_nondeterministic"


def is_infra_error(attempt: Attempt) -> bool:
    """An attempt the infrastructure lost: the verifier could not judge it, or the engine aborted its
    generation. It is neither right nor wrong (a crash of the checking sandbox must not be scored as
    the student's format failure), so it counts for nothing."""
    return attempt.reason in INFRA_ERRORS


def is_refused(attempt: Attempt) -> bool:
    """An attempt at a task whose gold was computed under other sandbox limits than this run's
    (``limits_changed:<field>``, ``tasks/checking.py``): the checker refused to judge it."""
    return reason_kind(attempt.reason) == LIMITS_CHANGED_KIND


def is_unjudged(attempt: Attempt) -> bool:
    """An attempt that counts for nothing: lost by the infrastructure, on a nondeterministic task
    (no right answer exists), or refused because its task's gold was computed under other limits.
    Not in rho, not rated, not trained on."""
    return is_infra_error(attempt) or attempt.reason == TASK_NONDETERMINISTIC or is_refused(attempt)
