"""The policy update as the step loop runs it: the run's micro-batching, and the update itself.

The update code is in ``populora/rl`` (``rl/update.py``: one member's update; ``rl/strategies.py``: how a
rank updates all of its members, one at a time or in one fused pass, chosen by ``rl.update_strategy``).
This module adds what needs the run config: the memory plan's token budget for the passes
(``micro_batching``). The names the doctor and the tests import from here are those of ``rl/update.py``.
"""

from __future__ import annotations

from populora.plan.inputs import train_budget
from populora.rl.packing import MicroBatching
from populora.rl.update import MemberGroup, accumulate_gradients, advantages_of, train_member

__all__ = ["MemberGroup", "MicroBatching", "accumulate_gradients", "advantages_of", "member_memory_bytes",
           "micro_batching", "train_member"]

PROBE = "__memory_probe__"


def micro_batching(cfg) -> MicroBatching:
    """The run's micro-batching: the memory plan's bound (``plan.inputs.train_budget``) and the policy's knobs."""
    return MicroBatching(train_budget(cfg), cfg.policy.train_micro_batch, cfg.policy.train_packing)


def member_memory_bytes(backend, batch, rl, micro_batches: MicroBatching) -> int:
    """Bytes one more member costs on the trainer's device once it has trained: its weights, float32
    masters and AdamW moments (which AdamW allocates at its first step: measured before it, the figure is
    an order of magnitude too low). A warm-up update of the first existing member comes first (its
    weights and optimizer state are put back afterwards); then a probe member is added and updated on
    ``batch`` by the run's strategy (``rl.update_strategy``), and removed. On CUDA the figure is the
    change of ``torch.cuda.memory_allocated``; elsewhere the bytes of the tensors the probe holds."""
    import torch

    from populora.rl.strategies import MemberBatch, strategy_for

    strategy = strategy_for(rl.update_strategy)
    first = backend.adapter_names()[0]
    weights, state = backend.get_weights(first), backend.optimizer_state(first)
    strategy.update(backend, [MemberBatch(first, batch)], rl, micro_batches)  # the warm-up update
    backend.set_weights(first, weights)
    backend.load_optimizer_state(first, state)
    cuda = backend.device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated(backend.device)
    backend.add_adapter(PROBE, backend.new_adapter_weights(seed=1))
    try:
        strategy.update(backend, [MemberBatch(PROBE, batch)], rl, micro_batches)
        if cuda:
            torch.cuda.synchronize()
            return int(torch.cuda.memory_allocated(backend.device) - before)
        held = list(backend.trainable_parameters(PROBE)) + list(getattr(backend, "trainer", backend)._masters.get(PROBE, []))

        def tensors(x):
            if isinstance(x, torch.Tensor):
                yield x
            elif isinstance(x, dict):
                for v in x.values():
                    yield from tensors(v)
            elif isinstance(x, list | tuple):
                for v in x:
                    yield from tensors(v)

        held += list(tensors(backend.optimizer_state(PROBE)["state"]))
        return int(sum(t.numel() * t.element_size() for t in held))
    finally:
        backend.remove_adapter(PROBE)
