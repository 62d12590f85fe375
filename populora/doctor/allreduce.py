"""An all-reduce over local ranks: NCCL over every local GPU, or gloo over 2 local CPU ranks.

Bandwidths as nccl-tests defines them (its ``doc/PERFORMANCE.md``): for ``size`` bytes reduced in
``seconds``, the algorithm bandwidth is ``size / seconds`` and the bus bandwidth is
``algbw * 2 (n - 1) / n`` for ``n`` ranks (what each link carries in a ring all-reduce, comparable
with the hardware's peak). With one rank nothing crosses a link: busbw is 0 by that formula.

Ranks are started with ``torch.multiprocessing.spawn`` and meet over TCP on 127.0.0.1; each size is
reduced ``warmup`` times untimed, then ``iters`` times between barriers; the time per iteration is
the slowest rank's mean. Each rank checks the sum (rank r sends ``r + 1``; the sum is ``n (n + 1) / 2``).
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from pathlib import Path

from populora.doctor.records import AllReduceResult, AllReduceSize

GB = 1e9  # nccl-tests reports GB/s in units of 1e9 bytes


def alg_bandwidth(size_bytes: int, seconds: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 bytes): bytes reduced per second of one all-reduce."""
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    return size_bytes / seconds / GB


def bus_bandwidth(algbw: float, ranks: int) -> float:
    """nccl-tests' bus bandwidth of an all-reduce over ``ranks`` ranks: ``algbw * 2 (n - 1) / n``."""
    if ranks < 1:
        raise ValueError(f"ranks must be >= 1, got {ranks}")
    return algbw * 2 * (ranks - 1) / ranks


def size_result(size_bytes: int, seconds: float, ranks: int, correct: bool) -> AllReduceSize:
    algbw = alg_bandwidth(size_bytes, seconds)
    return AllReduceSize(size_bytes, seconds, algbw, bus_bandwidth(algbw, ranks), correct)


def default_sizes(backend: str) -> tuple[int, ...]:
    """Message sizes in bytes (ours): up to 1 GiB on NCCL (bandwidth-bound), up to 64 MiB on gloo."""
    mib = 1 << 20
    return (8 * mib, 64 * mib, 256 * mib, 1024 * mib) if backend == "nccl" else (1 * mib, 16 * mib, 64 * mib)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world: int, backend: str, port: int, sizes, warmup: int, iters: int, out_dir: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    device = torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    rows = []
    try:
        for size in sizes:
            x = torch.empty(size // 4, dtype=torch.float32, device=device)
            for _ in range(warmup):
                x.fill_(rank + 1)
                dist.all_reduce(x)
            x.fill_(rank + 1)
            dist.barrier()
            if backend == "nccl":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(x)
            if backend == "nccl":
                torch.cuda.synchronize()
            seconds = (time.perf_counter() - t0) / iters
            ok = _check(x, world, iters)
            worst = torch.tensor([seconds], dtype=torch.float64, device=device)
            dist.all_reduce(worst, op=dist.ReduceOp.MAX)
            rows.append({"size": size, "seconds": float(worst.item()), "correct": ok})
            del x
    finally:
        dist.destroy_process_group()
    if rank == 0:
        Path(out_dir, "allreduce.json").write_text(json.dumps(rows))


def _check(x, world: int, iters: int) -> bool:
    """Rank r starts with r + 1; one all-reduce gives S = n (n + 1) / 2 everywhere, each further one
    multiplies by n."""
    expected = world * (world + 1) / 2 * world ** (iters - 1)
    return bool(abs(float(x[0]) - expected) <= 1e-3 * expected and float(x.min()) == float(x.max()))


def run_allreduce(backend: str, world: int, sizes: tuple[int, ...] | None = None, warmup: int = 2,
                  iters: int = 5) -> AllReduceResult:
    """All-reduce (sum, float32) over ``world`` spawned local ranks with ``backend`` (nccl or gloo)."""
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp

    sizes = tuple(sizes or default_sizes(backend))
    version = ""
    if backend == "nccl":
        v = torch.cuda.nccl.version()
        version = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    if not dist.is_available() or (backend == "nccl" and not dist.is_nccl_available()):
        return AllReduceResult(backend, world, version, (), error=f"torch.distributed has no {backend} backend")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="populora-doctor-") as tmp:
        saved = os.environ.get("OMP_NUM_THREADS")
        os.environ["OMP_NUM_THREADS"] = "1"  # each spawned rank: one thread (2 ranks on 2 cores)
        try:
            mp.spawn(_rank_main, args=(world, backend, _free_port(), sizes, warmup, iters, tmp), nprocs=world)
        except Exception as e:  # a rank failed: the report says which error, the doctor goes on
            return AllReduceResult(backend, world, version, (), error=f"{type(e).__name__}: {str(e).strip().splitlines()[-1]}")
        finally:
            if saved is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = saved
        rows = json.loads(Path(tmp, "allreduce.json").read_text())
    results = tuple(size_result(r["size"], r["seconds"], world, r["correct"]) for r in rows)
    return AllReduceResult(backend, world, version, results, wall_s=time.perf_counter() - t0)
