"""What of a self-play run is saved and restored: checkpoint payloads, restore, the final adapters,
the summary. Functions of a ``SelfPlay`` and its run directory (``populora.run_dir``); the runner
(``runner.py``) decides when, ``populora.checkpoint`` how checkpoints are written.
"""

from __future__ import annotations

from populora.population import ratings
from populora.population.members import Member
from populora.selfplay.metrics import last_rates
from populora.tasks.buffers import TaskBuffers


def led_members(sp) -> list[Member]:
    """The members this rank speaks for (writes their checkpoint and export files)."""
    return [m for m in sp.members.values() if sp.ranks.leads(m.id)]


def checkpoint_payload(sp) -> tuple[dict, dict, dict]:
    """(adapters and optimizer states of the members this rank leads, the run state)."""
    led = led_members(sp)
    adapters = {m.adapter: sp.backend.get_weights(m.adapter) for m in led}
    opt = {m.adapter: sp.backend.optimizer_state(m.adapter) for m in led}
    state = {
        "members": [m.to_dict() for m in sp.members.values()],
        "buffers": sp.buffers.to_json(),
        "events": sp.events,
        "last_metrics": {k: v for k, v in sp.last_metrics.items() if isinstance(v, (int, float, str))},
    }
    return adapters, opt, state


def restore(sp, ckpt) -> None:
    """Members in their saved slot order, placed on this run's ranks (the world size may differ from
    the run that saved it); every rank loads every adapter, and the optimizer states of the members
    it trains."""
    sp.members = {d["id"]: Member.from_dict(d) for d in ckpt.state["members"]}
    sp.ranks.place(list(sp.members))
    install_adapters(sp.backend, {m.adapter: ckpt.adapters[m.adapter] for m in sp.members.values()})
    sp.ranks.settle_masters()  # before optimizer states load: they follow their parameters' device
    for m in sp.members.values():
        if sp.ranks.trains(m.id):
            sp.backend.load_optimizer_state(m.adapter, ckpt.optimizer_states[m.adapter])
    sp.buffers = TaskBuffers.from_json(ckpt.state["buffers"])
    sp.events = list(ckpt.state.get("events", []))
    sp.last_metrics = dict(ckpt.state.get("last_metrics", {}))
    sp.step_done = ckpt.step


def install_adapters(backend, weights: dict) -> None:
    """Make ``backend``'s adapters exactly ``weights`` (name -> weights), each with a fresh optimizer state.

    An adapter the backend holds under the same name gets the weights; the others take the places of the
    backend's adapters that are not wanted (``replace_adapter``, whose cost does not grow with the number
    of adapters on the HF trainer); what is left is removed or added. A resume thus costs no more per
    member with 64 members than with 8."""
    live = backend.adapter_names()
    spare = [n for n in live if n not in weights]
    for name, w in weights.items():
        if name in live:
            backend.set_weights(name, w)
            backend.reset_optimizer(name)
        elif spare:
            backend.replace_adapter(spare.pop(0), name, w)
        else:
            backend.add_adapter(name, w)
    for name in spare:
        backend.remove_adapter(name)


def export_final(sp) -> None:
    """Final adapters as PEFT directories (each by the rank that leads it) + members.json (rank 0)."""
    for m in led_members(sp):
        sp.backend.get_weights(m.adapter).save_peft(sp.run.adapter_dir(m.id), base_model_name_or_path=sp.cfg.policy.model)
    sp.comm.barrier()
    if not sp.comm.is_main:
        return
    # evaluation reads the single agent of a baseline run as the role "baseline"
    sp.run.write_members([
        {"id": m.id, "role": "baseline" if sp.baseline else m.role, "adapter_dir": f"{sp.run.ADAPTERS}/{m.id}",
         "mu": None if sp.baseline else m.rating.mu, "sigma": None if sp.baseline else m.rating.sigma,
         "parents": list(m.parents), "operator": m.operator, "born_step": m.born_step}
        for m in sp.members.values()])


def summary(sp, status: str) -> dict:
    """The run's summary (``summary.json``): status, steps, members with ratings, last step's rates."""
    cfg = sp.cfg
    return {
        "name": cfg.name,
        "status": status,
        "steps_done": sp.step_done,
        "steps": cfg.selfplay.steps,
        "baseline": sp.baseline,
        "model": cfg.policy.model,
        "members": [
            {"id": m.id, "role": m.role, "adapter": m.adapter, "born_step": m.born_step,
             "mu": None if sp.baseline else m.rating.mu,
             "sigma": None if sp.baseline else m.rating.sigma,
             "score": None if sp.baseline else ratings.conservative_score(m.rating, cfg.ratings)}
            for m in sp.members.values()
        ],
        "last_step_rates": last_rates(sp.last_metrics),
        "evolution_events": len(sp.events),
        "run_dir": str(sp.run_dir),
    }
