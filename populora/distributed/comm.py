"""The collectives a run needs, over torch.distributed; ``LocalComm`` is the one-rank case.

Ranks exchange only three kinds of things:

- records of a step (generations, verdicts, checked attempts, training statistics): plain Python
  objects, with ``all_gather_object`` (pickled: the peers are the run's own ranks);
- adapter weights, when an evolved child is born on another rank than its parent: a tensor
  ``broadcast`` of the parent's flattened LoRA factors from the rank that owns it;
- LoRA gradients of a member whose group spans several ranks: an ``all_reduce`` (sum) over the
  group, adapter parameters only.

Every rank calls the same collectives in the same order (the loop is the same program on every
rank, driven by the same seeded generators), so no rank waits for a message that never comes. A
rank that dies makes its peers' next collective fail (gloo: connection closed; NCCL: the process
group's timeout), and the job ends with an error instead of hanging.

``seconds`` accumulates the wall time spent inside collectives (``time/collectives_s`` per step).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from populora.policy.adapters import AdapterWeights


class Comm:
    """One rank's view of the run's ranks. This base class is the single-rank case."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    local_world: int = 1

    def __init__(self) -> None:
        self.seconds = 0.0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order."""
        return [obj]

    def gather_in(self, ranks: Sequence[int], obj: Any) -> list[Any]:
        """The ``obj`` of every rank of ``ranks`` (a member's group), in rank order; called by those ranks."""
        return [obj]

    def sum_in(self, ranks: Sequence[int], tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` summed in place over ``ranks``; called by those ranks."""
        return tensor

    def broadcast_weights(self, weights: AdapterWeights | None, src: int) -> AdapterWeights:
        """The adapter weights held by rank ``src`` (None on the other ranks), on every rank."""
        if weights is None:
            raise ValueError(f"broadcast_weights: rank {src} must hold the weights")
        return weights

    def any(self, flag: bool) -> bool:
        """True on every rank if ``flag`` is true on any rank (e.g. a preemption signal)."""
        return bool(flag)

    def barrier(self) -> None:
        """Wait for every rank."""

    def prepare_groups(self, placement: Mapping[str, tuple[int, ...]]) -> None:
        """Create the process groups of members that span several ranks (collective on all ranks)."""

    def close(self) -> None:
        """Leave the process group."""


class LocalComm(Comm):
    """A run of one rank: every collective is the identity."""


class TorchComm(Comm):
    """torch.distributed (gloo on CPU, NCCL on GPU); the process group must be initialised."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        import torch.distributed as dist

        super().__init__()
        if not dist.is_initialized():
            raise RuntimeError("TorchComm needs torch.distributed.init_process_group() first")
        self.dist = dist
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        import os

        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(self.world)))
        self.device = torch.device(device)
        self._groups: dict[tuple[int, ...], Any] = {}

    @contextmanager
    def _timed(self):
        t = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - t

    def gather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world
        with self._timed():
            self.dist.all_gather_object(out, obj)
        return out

    def prepare_groups(self, placement: Mapping[str, tuple[int, ...]]) -> None:
        # new_group is collective over ALL ranks, in the same order on each: sorted, deduplicated.
        for ranks in sorted({tuple(r) for r in placement.values() if len(r) > 1}):
            if ranks not in self._groups:
                self._groups[ranks] = self.dist.new_group(list(ranks))

    def _group(self, ranks: Sequence[int]):
        ranks = tuple(ranks)
        if len(ranks) == self.world:
            return None  # the default group
        if ranks not in self._groups:
            raise RuntimeError(f"no process group for ranks {ranks}; call prepare_groups(placement) first")
        return self._groups[ranks]

    def gather_in(self, ranks: Sequence[int], obj: Any) -> list[Any]:
        if len(ranks) == 1:
            return [obj]
        out: list[Any] = [None] * len(ranks)
        with self._timed():
            self.dist.all_gather_object(out, obj, group=self._group(ranks))
        return out

    def sum_in(self, ranks: Sequence[int], tensor: torch.Tensor) -> torch.Tensor:
        if len(ranks) == 1:
            return tensor
        with self._timed():
            moved = tensor.to(self.device)
            self.dist.all_reduce(moved, op=self.dist.ReduceOp.SUM, group=self._group(ranks))
            if moved is not tensor:
                tensor.copy_(moved)
        return tensor

    def broadcast_weights(self, weights: AdapterWeights | None, src: int) -> AdapterWeights:
        with self._timed():
            if self.rank == src:
                if weights is None:
                    raise ValueError(f"broadcast_weights: rank {src} must hold the weights")
                names = sorted(weights.tensors)
                meta = [(weights.rank, weights.alpha, tuple(weights.target_modules),
                         [(n, tuple(weights.tensors[n][0].shape), tuple(weights.tensors[n][1].shape)) for n in names],
                         str(next(iter(weights.tensors.values()))[0].dtype).removeprefix("torch."))]
            else:
                meta = [None]
            self.dist.broadcast_object_list(meta, src=src)
            rank, alpha, targets, shapes, dtype_name = meta[0]
            dtype = getattr(torch, dtype_name)
            total = sum(a[0] * a[1] + b[0] * b[1] for _, a, b in shapes)
            if self.rank == src:
                flat = torch.cat([t.reshape(-1) for n in sorted(weights.tensors) for t in weights.tensors[n]])
                flat = flat.to(self.device, dtype)
            else:
                flat = torch.empty(total, dtype=dtype, device=self.device)
            self.dist.broadcast(flat, src=src)
            if self.rank == src:
                return weights
            flat, tensors, at = flat.cpu(), {}, 0
            for name, sa, sb in shapes:
                na, nb = sa[0] * sa[1], sb[0] * sb[1]
                tensors[name] = (flat[at:at + na].view(sa).clone(), flat[at + na:at + na + nb].view(sb).clone())
                at += na + nb
            return AdapterWeights(rank, alpha, targets, tensors)

    def any(self, flag: bool) -> bool:
        t = torch.tensor([1 if flag else 0], dtype=torch.int64, device=self.device)
        with self._timed():
            self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return bool(t.item())

    def barrier(self) -> None:
        with self._timed():
            self.dist.barrier()

    def close(self) -> None:
        if self.dist.is_initialized():
            self.dist.destroy_process_group()
