"""Starting one vLLM engine for this rank: its arguments, its environment, and where it landed.

Everything here is decided before ``vllm.LLM(...)`` runs (``VLLMEngine.llm``) or checked right after;
the functions are pure where they can be (tested without vLLM, against every release in the table).

Per rank (``EngineContext``): the engine's seed comes from the run's seed and the rank (ranks given
the same prompts sample differently); its compile cache is its own (``VLLM_CACHE_ROOT/rank-<r>``:
eight engines compiling at once would write one directory non-atomically); on CPU its OpenMP
threads are bound to this rank's share of the cores the process may use (vLLM's ``auto`` binding
sees one local rank and puts every rank's engine on the same cores); Slurm's preemption signal
(SIGUSR2, sent to every process of a job step) is blocked in the engine's processes, which would
otherwise die of it, so that only the trainer sees it and checkpoints.

Versions (``vllm_api.py``): engine arguments are checked against the installed vLLM's ``EngineArgs``;
an option the installed vLLM lacks is an error naming the option when it was asked for
(``policy.vllm.sleep_between_phases``), and is left out when it only selects vLLM's default
(``logprobs_mode="raw_logprobs"``). ``data/vllm_api.json`` records the surface of each release and a
test checks every keyword used here against every supported release.

Placement: on CUDA, a started engine must have taken its share of THIS rank's device
(``placement_problem``); otherwise it went to another GPU, and the run stops naming the device.

vLLM is imported only when the engine is built, so this module imports without it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import torch

from populora.policy.engine import EngineContext, EngineFailure
from populora.signals import children_immune

if TYPE_CHECKING:  # config.py imports the engine, which imports this module
    from populora.policy.config import PolicyConfig

INSTALL_HINT = "pip install 'populora[vllm]' on a CUDA machine, or `make setup-vllm` for vLLM's CPU build"
# variables that vLLM's CPU platform overwrites in the calling process for the processes it starts
# (platforms/cpu.py: LOCAL_WORLD_SIZE = its tensor-parallel size, LD_PRELOAD = its allocator and
# OpenMP): put back once the engine has started, so the launcher's values stay the rank's
RESTORED_VARIABLES = ("LOCAL_WORLD_SIZE", "LOCAL_RANK", "RANK", "WORLD_SIZE", "LD_PRELOAD")


def placement_problem(free_before: int, free_after: int, total: int, utilization: float, device: str) -> str | None:
    """Why the engine's memory is not on this rank's device, or ``None``: a started engine holds
    about ``utilization`` of its GPU, so the free memory of the trainer's device must have dropped by
    at least half of that (ours: half leaves room for the trainer freeing cached blocks meanwhile).
    Otherwise the engine took another GPU, which is what a rank that sees every GPU of the node gets
    from vLLM (its engine process starts on local device 0)."""
    taken = free_before - free_after
    if taken >= 0.5 * utilization * total:
        return None
    return (f"started, but its memory is not on this rank's device {device}: free memory there fell by "
            f"{taken / 2**30:.1f} GiB, expected about {utilization * total / 2**30:.1f} GiB "
            f"(policy.vllm.gpu_memory_utilization={utilization}); each rank must see only its own GPU "
            "(populora train narrows CUDA_VISIBLE_DEVICES; under srun ask for --gpus-per-task=1)")


class VLLMEngineError(EngineFailure):
    """The installed vLLM or the device cannot do what the config asks; the message names the option."""


def import_vllm():
    try:
        import vllm
    except ImportError as e:
        raise ImportError(f"policy.engine=vllm needs vLLM: {INSTALL_HINT}") from e
    return vllm


def resolved_device(config: PolicyConfig) -> str:
    """``cpu`` or ``cuda``: where ``policy.device`` puts the trainer (``auto``: CUDA when present)."""
    if config.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return "cpu" if config.device == "cpu" else "cuda"


def engine_platform() -> str:
    """The device type of the platform the installed vLLM reports (``cuda``, ``cpu``, ...)."""
    from vllm.platforms import current_platform

    return str(current_platform.device_type)


def engine_dtype_name(config: PolicyConfig, platform: str = "cuda") -> str:
    """vLLM's ``dtype``: ``auto`` is bf16 on CUDA and float32 on CPU (as the trainer: ``policy.dtype``)."""
    if config.dtype != "auto":
        return config.dtype
    return "float32" if platform == "cpu" else "bfloat16"


def engine_dtype(config: PolicyConfig, platform: str = "cuda") -> torch.dtype:
    return getattr(torch, engine_dtype_name(config, platform))


def model_len(config: PolicyConfig, new_tokens: int) -> int:
    """vLLM's ``max_model_len``: ``policy.vllm.max_model_len``, or 0 = ``policy.max_prompt_tokens`` +
    ``new_tokens`` (the longest completion asked for: what the KV cache must hold for one sequence)."""
    return config.vllm.max_model_len or config.max_prompt_tokens + new_tokens


def engine_kwargs(config: PolicyConfig, max_loras: int, max_model_len: int, available: set[str],
                  version: str = "installed", platform: str = "cuda", seed: int = 0) -> dict:
    """Keyword arguments of ``vllm.LLM`` for ``config`` on ``platform``, checked against ``available``
    (the names the installed vLLM's ``LLM`` / ``EngineArgs`` take). Pure: tested against every
    release in the table."""
    v = config.vllm
    from populora.policy.models import resolve_model

    if v.sleep_between_phases and platform == "cpu":
        raise VLLMEngineError("policy.vllm.sleep_between_phases=true: the installed vLLM runs on the CPU "
                              "platform, which has no sleep mode; set it to false")
    kwargs = dict(
        model=resolve_model(config.model),
        tokenizer=resolve_model(config.model),
        dtype=engine_dtype_name(config, platform),
        enable_lora=True,
        max_loras=max_loras,
        max_lora_rank=config.lora.rank,
        max_cpu_loras=max(v.max_cpu_loras or 2 * max_loras, max_loras),
        gpu_memory_utilization=v.gpu_memory_utilization,
        max_model_len=max_model_len,
        enforce_eager=v.enforce_eager,
        seed=seed,  # the engine's own stream (EngineContext.seed); requests carry seeds when seeded_sampling is on
    )
    if platform == "cpu":
        kwargs["kv_cache_memory_bytes"] = int(v.cpu_kv_cache_gib * 2**30)
    if v.sleep_between_phases:
        kwargs["enable_sleep_mode"] = True
    if v.load_format != "auto":
        kwargs["load_format"] = v.load_format
    if "logprobs_mode" in available:
        kwargs["logprobs_mode"] = "raw_logprobs"  # same quantity as HFBackend / completion_logprobs
    missing = sorted(k for k in kwargs if k not in available)
    if missing:
        option = {"enable_sleep_mode": "policy.vllm.sleep_between_phases",
                  "kv_cache_memory_bytes": "policy.vllm.cpu_kv_cache_gib"}.get(missing[0], missing[0])
        raise VLLMEngineError(f"vLLM {version} does not take {missing} (for {option}); install vLLM "
                              f">= the version docs/backends.md names")
    return kwargs


def omp_binding(cores: Sequence[int], local_rank: int, local_world: int) -> str:
    """This rank's share of ``cores`` as vLLM's ``VLLM_CPU_OMP_THREADS_BIND`` list ("0,1"): the cores
    split in ``local_world`` contiguous parts; with fewer cores than ranks, ranks share one core each."""
    cores = sorted(cores)
    if not cores:
        raise ValueError("no CPU cores to bind to")
    if len(cores) < local_world:
        return str(cores[local_rank % len(cores)])
    per, extra = divmod(len(cores), local_world)
    start = local_rank * per + min(local_rank, extra)
    return ",".join(str(c) for c in cores[start:start + per + (local_rank < extra)])


def engine_environment(context: EngineContext, platform: str, environ: Mapping[str, str],
                       cores: Sequence[int]) -> dict[str, str]:
    """Environment variables the engine (and the processes it starts) runs with, for this rank: its
    own compile cache, and on CPU its own cores unless the user bound them. Pure."""
    root = environ.get("VLLM_CACHE_ROOT") or os.path.join(
        environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "vllm")
    env = {"VLLM_CACHE_ROOT": os.path.join(root, f"rank-{context.rank}")}
    if platform == "cpu" and environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto") == "auto":
        env["VLLM_CPU_OMP_THREADS_BIND"] = omp_binding(cores, context.local_rank, context.local_world)
    return env


@contextlib.contextmanager
def engine_start(env: Mapping[str, str]) -> Iterator[None]:
    """While the engine starts (it spawns its processes then): ``env`` set, the preemption signals
    blocked so that the engine's processes inherit the block (``populora/signals.py``), and the
    variables vLLM rewrites put back afterwards, and this process's torch threads (vLLM's client
    lowers them to 1 "for serving"; ``policy.cpu_threads`` is the trainer's setting)."""
    saved = {k: os.environ.get(k) for k in (*env, *RESTORED_VARIABLES)}
    os.environ.update(env)
    threads = torch.get_num_threads()
    try:
        with children_immune():
            yield
    finally:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)  # in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0) vLLM refuses it
        for k, value in saved.items():
            if value is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = value
