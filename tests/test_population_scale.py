"""64 members: matchmaking and evolution keep their properties, the trainer adds and replaces adapters at a
cost that does not grow with the adapters already there (the same layers as peft's own ``add_adapter``).

Pure functions at 64 members (milliseconds); one tiny trainer for the adapter tests.
"""

from __future__ import annotations

import random
import statistics
from collections import Counter

import pytest
import torch

from populora.policy.adapters import AdapterWeights
from populora.population.evolution import EvolutionConfig, pbt_step
from populora.population.matchmaking import MatchmakingConfig, pair
from populora.population.members import founders
from populora.population.ratings import Rating, RatingConfig, conservative_score, prior

RCFG = RatingConfig()
SHAPES = {"model.layers.0.self_attn.q_proj": (8, 8)}


def _rated(n_teachers: int, n_students: int, seed: int = 0):
    rng = random.Random(seed)
    members = founders(n_teachers, n_students, prior(RCFG))
    for m in members:
        m.rating = Rating(rng.uniform(15.0, 35.0), rng.uniform(1.0, 4.0))
    return members


# -- PFSP at 64 -----------------------------------------------------------------------------------
@pytest.mark.parametrize("n_teachers,n_students", [(32, 32), (40, 24), (24, 40)])
def test_pfsp_at_64_members_pairs_everyone_and_spreads_the_load(n_teachers, n_students):
    members = _rated(n_teachers, n_students)
    ratings = {m.id: m.rating for m in members}
    teachers = [m.id for m in members if m.role == "teacher"]
    students = [m.id for m in members if m.role == "student"]
    rng = random.Random(1)
    for _ in range(20):
        pairs = pair(teachers, students, ratings, MatchmakingConfig(), RCFG, rng)
        assert [t for t, _ in pairs] == teachers
        load = Counter(s for _, s in pairs)
        if n_teachers >= n_students:  # every student plays, loads differ by at most one
            assert set(load) == set(students) and max(load.values()) - min(load.values()) <= 1
        else:  # distinct students while any is left
            assert max(load.values()) == 1


def test_pfsp_at_64_members_still_prefers_balanced_pairs():
    """Over 300 steps of 32 teachers and 32 students rated 15..35, PFSP's variance weighting pairs members
    closer in rating than uniform matchmaking does, by more than six standard errors of the difference."""
    members = _rated(32, 32, seed=3)
    ratings = {m.id: m.rating for m in members}
    teachers = [m.id for m in members if m.role == "teacher"]
    students = [m.id for m in members if m.role == "student"]

    def gaps(weighting):
        rng = random.Random(5)
        out = []
        for _ in range(300):
            pairs = pair(teachers, students, ratings, MatchmakingConfig(weighting), RCFG, rng)
            out.append(statistics.fmean(abs(ratings[t].mu - ratings[s].mu) for t, s in pairs))
        return out

    pfsp, uniform = gaps("variance"), gaps("uniform")
    se = ((statistics.variance(pfsp) + statistics.variance(uniform)) / len(pfsp)) ** 0.5  # of the difference
    assert statistics.fmean(uniform) - statistics.fmean(pfsp) > 6 * se


# -- evolution at 64 ------------------------------------------------------------------------------
def test_pbt_at_64_members_replaces_the_bottom_quarter_of_each_role_by_children_of_the_top_half():
    members = _rated(32, 32, seed=7)
    weights = {m.adapter: AdapterWeights.init(SHAPES, 2, 4, b_init="random", b_std=0.1, seed=i)
               for i, m in enumerate(members)}
    cfg = EvolutionConfig(interval=20, fraction=0.25, top_fraction=0.5, min_age=10)
    young = min((m for m in members if m.role == "teacher"), key=lambda m: conservative_score(m.rating, RCFG))
    young.born_step = 15  # the weakest teacher is too young to be judged at step 20
    births = pbt_step(members, 20, 200, cfg, RCFG, random.Random(0), weights)
    again = pbt_step(members, 20, 200, cfg, RCFG, random.Random(0), weights)
    assert [b.record for b in births] == [b.record for b in again]  # reproducible from the generator
    for role in ("teacher", "student"):
        pool = sorted((m for m in members if m.role == role), key=lambda m: (-conservative_score(m.rating, RCFG), m.id))
        zone = {m.id for m in pool[-8:]}  # floor(0.25 x 32) = 8 weakest
        mine = [b for b in births if b.child.role == role]
        replaced = {b.replaced.id for b in mine}
        assert replaced == zone - {young.id}  # the young one is spared, nobody stronger taken instead
        assert pool[0].id not in replaced
        survivors = [m for m in pool if m.id not in replaced]
        top = {m.id for m in survivors[:16]}  # ceil(0.5 x 32)
        for b in mine:
            assert set(b.child.parents) <= top and b.child.slot == b.replaced.slot
            assert b.child.id == f"{role[0]}{b.child.slot}-20" and b.child.rating == prior(RCFG)
    ids = [b.child.id for b in births]
    assert len(set(ids)) == len(ids) == 15


# -- the trainer's adapters at 64 -----------------------------------------------------------------
@pytest.fixture(scope="module")
def trainer():
    from populora.config import load_config
    from populora.policy.hf import HFBackend

    return HFBackend(load_config("configs/tiny.yaml").policy)


def _layers(backend, name):
    """What peft made for adapter ``name`` on every LoRA layer: shapes, dtypes, scaling, rank, alpha."""
    slot = backend._slots[name]
    out = {}
    for path, _, _ in backend._params[name]:
        layer = backend._peft.base_model.model.get_submodule(path)
        a, b = layer.lora_A[slot].weight, layer.lora_B[slot].weight
        out[path] = (tuple(a.shape), tuple(b.shape), a.dtype, b.dtype, layer.scaling[slot], layer.r[slot],
                     layer.lora_alpha[slot], type(layer.lora_dropout[slot]).__name__)
    return out


def test_a_further_adapter_is_what_peft_would_add_and_scores_the_same(trainer, monkeypatch):
    prompt, completion = [[5, 6, 7, 8]], [[9, 10, 11]]
    trainer.add_adapter("first", trainer.new_adapter_weights(seed=1))
    w = trainer.new_adapter_weights(seed=2)
    trainer.add_adapter("fast", w)  # the per-layer path
    monkeypatch.setattr(type(trainer), "_inject", lambda self, slot, cfg: self._peft.add_adapter(slot, cfg))
    trainer.add_adapter("peft", w)  # peft's own add_adapter
    monkeypatch.undo()
    assert _layers(trainer, "fast") == _layers(trainer, "peft")
    fast = trainer.completion_logprobs("fast", prompt, completion, with_grad=False).logprobs
    slow = trainer.completion_logprobs("peft", prompt, completion, with_grad=False).logprobs
    assert torch.equal(fast, slow)
    for name in ("first", "fast", "peft"):
        trainer.remove_adapter(name)


def test_a_replaced_adapter_takes_the_slot_and_serves_only_its_new_weights(trainer):
    prompt, completion = [[5, 6, 7, 8]], [[9, 10, 11]]
    trainer.add_adapter("old", trainer.new_adapter_weights(seed=1))
    trainer.add_adapter("other", trainer.new_adapter_weights(seed=3))
    child = trainer.new_adapter_weights(seed=2)
    slot = trainer._slots["old"]
    trainer.replace_adapter("old", "child", child)
    assert trainer._slots["child"] == slot and "old" not in trainer.adapter_names()
    assert trainer.get_weights("child").equal(child)
    assert trainer.optimizer_state("child")["state"] == {}  # a fresh optimizer
    trainer.add_adapter("reference", child)
    mine = trainer.completion_logprobs("child", prompt, completion, with_grad=False).logprobs
    ref = trainer.completion_logprobs("reference", prompt, completion, with_grad=False).logprobs
    assert torch.equal(mine, ref)
    trainer.add_adapter("old", trainer.new_adapter_weights(seed=4))  # the name is free again; its slot is not
    assert trainer._slots["old"] != slot
    for name in ("child", "other", "reference", "old"):
        trainer.remove_adapter(name)


# -- a 32-member run: SIGKILL and resume ----------------------------------------------------------
# 16 teachers + 16 students on tiny, the fewest steps that evolve and checkpoint: evolution after step 1
# (min_age 1: a child still trains a step), a checkpoint every step, short completions.
BIG = ["population.teachers=16", "population.students=16", "selfplay.steps=2", "evolution.interval=1",
       "evolution.min_age=1", "selfplay.sequences_per_adapter=3", "selfplay.teacher_sampling.max_new_tokens=4",
       "selfplay.student_sampling.max_new_tokens=4", "run.checkpoint_every=1"]


@pytest.mark.slow
def test_a_32_member_run_killed_with_sigkill_resumes_bit_identically(tmp_path):
    import json
    import os
    import signal
    import time

    from test_selfplay import TINY, _final_adapters, _spawn_train

    from populora.checkpoint import list_checkpoints
    from populora.selfplay.metrics import read_metrics, without_timings
    from populora.selfplay.runner import train

    straight = tmp_path / "straight"
    assert train(TINY, BIG, run_dir=str(straight), progress=False)["steps_done"] == 2
    rd = tmp_path / "killed"
    proc = _spawn_train(rd, BIG)
    deadline = time.time() + 600
    while time.time() < deadline and not list_checkpoints(rd / "checkpoints"):
        time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (rd / "summary.json").exists() and [s for s, _ in list_checkpoints(rd / "checkpoints")] == [1]
    summary = train(None, [], run_dir=str(rd), resume=True, progress=False)
    assert summary["steps_done"] == 2 and len(summary["members"]) == 32
    want, got = _final_adapters(straight), _final_adapters(rd)
    assert want.keys() == got.keys() and len(want) == 32
    assert all(want[k].equal(got[k]) for k in want)
    members = json.loads((rd / "members.json").read_text())
    assert members == json.loads((straight / "members.json").read_text())
    assert sum(1 for m in members if m["born_step"] == 1) == 16  # evolution ran: a child in every other slot
    for name in ("lineage.jsonl", "tasks.jsonl"):
        assert (rd / name).read_text() == (straight / name).read_text(), name
    assert [without_timings(r) for r in read_metrics(rd)] == [without_timings(r) for r in read_metrics(straight)]


def test_published_versions_leave_dev_shm_when_it_cannot_hold_two_of_every_member():
    """64 members of a 7B at rank 32 in bf16 are 10.3 GB a version; /dev/shm must hold two (old and new)."""
    from populora.policy.vllm_adapters import default_adapter_root

    assert default_adapter_root(1 << 60) is None  # more than any /dev/shm: $TMPDIR


def _masters_case(device: str):
    """Two bf16 adapters with float32 masters; the masters of ``other`` go to host memory, a replaced adapter
    keeps its place there, and weights read and written through the masters are unchanged by the moves."""
    from populora.policy import make_backend

    be = make_backend({"model": "tiny", "device": device, "dtype": "bfloat16" if device == "cuda" else "float32",
                       "adapter_dtype": "bfloat16", "lora": {"rank": 8, "alpha": 16, "b_std": 0.05}})
    be.add_adapter("mine", be.new_adapter_weights(seed=0))
    be.add_adapter("other", be.new_adapter_weights(seed=1))
    before = {n: be.get_weights(n) for n in ("mine", "other")}
    be.keep_masters_on_host(["other"])
    assert all(m.device.type == "cpu" for m in be.trainer._masters["other"])
    assert all(m.device == be.trainer.device for m in be.trainer._masters["mine"])
    assert all(be.get_weights(n).equal(before[n]) for n in before)
    tl = be.completion_logprobs("mine", [[5, 6, 7]], [[8, 9]])
    be.optimizer_step("mine", -(tl.logprobs * tl.mask).sum())  # the trained member steps its masters in place
    child = be.new_adapter_weights(seed=2)
    be.replace_adapter("other", "child", child)  # the child takes the slot, and the slot's ranks
    assert all(m.device.type == "cpu" for m in be.trainer._masters["child"]) and be.get_weights("child").equal(child)
    be.add_adapter("late", be.new_adapter_weights(seed=3))  # not named: its masters on the trainer's device
    assert all(m.device == be.trainer.device for m in be.trainer._masters["late"])
    be.keep_masters_on_host(["late"])
    assert all(m.device.type == "cpu" for m in be.trainer._masters["late"])
    assert all(m.device == be.trainer.device for m in be.trainer._masters["child"])
    return be


def test_masters_of_members_other_ranks_train_move_to_host_memory_and_back():
    _masters_case("cpu")  # on CPU the host is the device: the bookkeeping, not the memory


@pytest.mark.gpu
def test_masters_of_members_other_ranks_train_leave_the_gpu():
    """On CUDA: the GPU holds one float32 copy less per member another rank trains."""
    be = _masters_case("cuda")
    free = sum(m.numel() * 4 for m in be.trainer._masters["mine"])
    before = torch.cuda.memory_allocated()
    be.keep_masters_on_host(["mine", "late"])
    assert before - torch.cuda.memory_allocated() >= free
