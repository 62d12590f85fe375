"""The ranks of a run, seen from the step loop: who generates, validates, checks and trains what.

Every rank holds every member's adapter weights. The step's generation requests and the records of
the sandbox stages are dealt round robin over the ranks and gathered back in order; each member is
trained by the rank(s) of its slot (``populora.distributed.placement``), then its new weights are
broadcast to every rank. One rank (W = 1, ``LocalComm``) is the same code with nothing to exchange.
See docs/distributed.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

from populora.distributed import placement as place
from populora.distributed.comm import Comm
from populora.distributed.env import local_cuda_index
from populora.policy.base import GenerationRequest, GenerationResult, SamplingParams
from populora.policy.engine import EngineFailure, ServedMismatch
from populora.rl.packing import MicroBatching
from populora.rl.strategies import MemberBatch, strategy_for
from populora.rl.update import MemberGroup
from populora.selfplay.records import StageError

log = logging.getLogger(__name__)


def rank_policy(policy, comm: Comm):
    """The policy config of this rank: with several ranks on a GPU node, rank i uses its own GPU."""
    if comm.world == 1 or policy.device in ("cpu",) or policy.device.startswith("cuda:"):
        return policy
    import torch

    if policy.device == "auto" and not torch.cuda.is_available():
        return policy
    # one visible GPU (narrow_visible_devices) is this rank's: cuda:0; several (not narrowed): its local rank's
    return policy.replace(device=f"cuda:{local_cuda_index(comm.local_rank, torch.cuda.device_count())}")


def one_line(text: str, limit: int = 500) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Ranks:
    """The run's communicator, the placement of members on ranks and this rank's policy backend."""

    def __init__(self, comm: Comm, backend, engine_name: str, max_refused_calls: int) -> None:
        self.comm, self.backend = comm, backend
        self.engine_name = engine_name
        self.max_refused_calls = max_refused_calls
        self.refused_calls = 0  # generate calls in a row whose every request was refused
        self.placement: dict[str, tuple[int, ...]] = {}

    # -- placement ----------------------------------------------------------------------------------
    def place(self, slots: list[str]) -> None:
        """Place the members (in slot order) on this run's ranks; the weights of the members other ranks
        train keep their float32 masters in host memory (``settle_masters``)."""
        self.placement = place.place(slots, self.comm.world)
        self.comm.prepare_groups(self.placement)
        self.settle_masters()

    def settle_masters(self) -> None:
        """The backend keeps the masters of the members this rank does not train in host memory (member ids
        are their adapters' names)."""
        self.backend.keep_masters_on_host([mid for mid in self.placement if not self.trains(mid)])

    def replace_members(self, children: Mapping[str, str], order: Sequence[str]) -> None:
        """Each child (``children[old] = new``) takes its predecessor's slot and ranks; ``order`` is the
        members' slot order afterwards."""
        ranks = {new: self.placement.pop(old) for old, new in children.items()}
        self.placement = {mid: ranks[mid] if mid in ranks else self.placement[mid] for mid in order}

    def trains(self, member_id: str) -> bool:
        """Whether this rank trains the member (holds its optimizer state)."""
        return self.comm.rank in self.placement[member_id]

    def leads(self, member_id: str) -> bool:
        """Whether this rank speaks for the member (writes its checkpoint and export files)."""
        return place.leader(self.placement, member_id) == self.comm.rank

    # -- generation ---------------------------------------------------------------------------------
    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingParams,
                 role: str) -> list[GenerationResult | None]:
        """``requests`` (each with its ``index``) dealt round robin over the ranks, results gathered in
        request order (every rank holds every adapter, so the phases where only teachers or only
        students write keep every rank busy).

        A failure of the engine on any rank (it did not start, its process died, its device failed)
        stops the run on every rank: the failing rank hands its error to the gather that every rank
        is in, and every rank raises ``EngineFailure`` with it, before anything of the step is
        trained or saved (the last checkpoint stays the one to resume from). Requests refused on
        their own (``GenerationResult.refused``) train nothing; ``selfplay.max_refused_calls`` calls in
        a row with nothing but refusals stop the run too.
        """
        if not requests:
            return []
        share = place.mine(place.round_robin(len(requests), self.comm.world), self.comm.rank)
        local, error = [None] * len(share), None
        if share:
            try:
                local = self.backend.generate([requests[i] for i in share], sampling)
            except Exception as e:  # handed to every rank below: the run stops everywhere, not here alone
                log.debug("generation failed on rank %d", self.comm.rank, exc_info=True)
                error = f"{type(e).__name__}: {e}" if not isinstance(e, EngineFailure) else str(e)
        out: list[GenerationResult | None] = [None] * len(requests)
        errors = []
        for rank, (part_share, part, part_error) in enumerate(self.comm.gather((share, local, error))):
            for i, result in zip(part_share, part):
                out[i] = result
            if part_error is not None:
                errors.append((rank, part_error))
        if errors:
            rank, why = errors[0]
            raise EngineFailure(f"generation engine {self.engine_name!r} failed on rank {rank} "
                                f"({role} requests): {one_line(why)}")
        refused = sum(1 for r in out if r is not None and r.refused)  # counted per role in stages.step_rates
        self.refused_calls = self.refused_calls + 1 if out and refused == len(out) else 0
        if self.refused_calls >= self.max_refused_calls:
            raise EngineFailure(f"{self.refused_calls} generate calls in a row had every request refused "
                                f"(last: {out[0].refused}); stopping (selfplay.max_refused_calls)")
        return out

    # -- the sandbox stages -------------------------------------------------------------------------
    def split(self, records: Sequence, stage: Callable[[list], tuple[list, StageError | None]]
              ) -> tuple[list, list[StageError]]:
        """Run ``stage`` on this rank's round-robin share of ``records``; gather every rank's results
        back into record order, with the errors the stage reported on each rank (in rank order)."""
        share = place.mine(place.round_robin(len(records), self.comm.world), self.comm.rank)
        done, error = stage([records[i] for i in share]) if share else ([], None)
        out = list(records)
        errors = []
        for part_share, part, part_error in self.comm.gather((share, done, error)):
            for i, r in zip(part_share, part):
                out[i] = r
            if part_error is not None:
                errors.append(part_error)
        return out, errors

    # -- training -----------------------------------------------------------------------------------
    def train(self, batches: Mapping[str, list], adapters: Mapping[str, str], rl, micro_batching: MicroBatching
              ) -> dict[str, dict]:
        """One policy update per member (``adapters``: member id -> adapter name), where it lives, by the
        update strategy ``rl.update_strategy`` names (one member at a time, or this rank's members in one
        fused pass); then every rank gets every member's statistics and new weights (broadcast from its
        leader rank)."""
        here = [mid for mid in batches if self.comm.rank in self.placement[mid]]
        members = [MemberBatch(adapters[mid], batches[mid], MemberGroup(self.comm, self.placement[mid])
                               if len(self.placement[mid]) > 1 else None) for mid in here]
        local: dict[str, dict] = {}
        for mid, stats in zip(here, strategy_for(rl.update_strategy).update(self.backend, members, rl, micro_batching)):
            if self.comm.rank == self.placement[mid][0]:
                local[mid] = stats
        merged: dict[str, dict] = {}
        for part in self.comm.gather(local):
            merged.update(part)
        if self.comm.world > 1:
            for mid in batches:
                self.sync_weights(mid, adapters[mid])
        return {mid: merged[mid] for mid in batches}  # in the same order on every rank

    # -- publishing -----------------------------------------------------------------------------------
    def publish(self) -> dict[str, float]:
        """Every rank's engine gets the changed adapters (``Policy.publish``); returns the publish metrics."""
        return self._everywhere(lambda backend: backend.publish().metrics(), "publish")

    def check_served(self, step: int) -> dict[str, float]:
        """Where ``step`` is due, every rank's engine must score the check sequences as its trainer does
        (``Policy.check_served``); returns the largest difference as ``publish/check_max_diff``."""
        def check(backend) -> dict[str, float]:
            if not backend.check_due(step):
                return {}
            diffs = backend.check_served(backend.adapter_names(), step)
            return {"publish/check_max_diff": max(diffs.values())} if diffs else {}

        return self._everywhere(check, "check")

    def _everywhere(self, fn, what: str) -> dict[str, float]:
        """``fn(backend)`` on every rank; an engine failure on any rank (a ``ServedMismatch`` included)
        stops every rank: the failing rank hands its message to a gather every rank is in, and every
        rank raises the same kind of error with it (the last checkpoint stays the one to resume from)."""
        out, error = {}, None
        if hasattr(self.backend, "publish"):  # a Policy (trainer + engine); a bare trainer has no engine
            try:
                out = fn(self.backend)
            except EngineFailure as e:
                log.debug("%s failed on rank %d", what, self.comm.rank, exc_info=True)
                error = (type(e).__name__, str(e))
        failures = [(rank, e) for rank, e in enumerate(self.comm.gather(error)) if e is not None]
        if failures:
            rank, (kind, why) = failures[0]
            cls = ServedMismatch if kind == ServedMismatch.__name__ else EngineFailure
            raise cls((f"rank {rank}: " if self.comm.world > 1 else "") + one_line(why))
        return out

    def sync_weights(self, member_id: str, adapter: str) -> None:
        """Every rank takes the member's weights from its leader (after an update or a restore)."""
        src = place.leader(self.placement, member_id)
        mine = self.backend.get_weights(adapter) if self.comm.rank == src else None
        weights = self.comm.broadcast_weights(mine, src)
        if self.comm.rank not in self.placement[member_id]:
            self.backend.set_weights(adapter, weights)
