"""Cluster entry points over the PopuLoRA library (submitit): training runs that survive
preemption (``train``), evaluation job arrays (``evaluate``), sweeps (``sweep``), executors from
cluster profiles (``profiles``, ``executors``), job plans with dependencies (``plan``) and sweep
status from Slurm accounting (``status``). Nothing here runs at import time."""
