"""``populora doctor``: the acceptance run of one node, with random weights at a preset's shapes.

Stages, one module each, passing frozen records (``records.py``) to the next:

- ``devices.py``: what the node has (GPUs, driver, CUDA, NCCL; on CPU the cores this process may use);
- ``allreduce.py``: an all-reduce over every local GPU (NCCL) or over 2 local CPU ranks (gloo), with
  algorithm and bus bandwidth as nccl-tests reports them;
- ``model.py``: a model of the preset's architecture with random weights (no download);
- ``training.py``: one training micro-batch per member through ``populora train``'s trainer code,
  peak memory per phase and tokens/s;
- ``generation.py``: mixed-adapter vs one-adapter vs base generation on the HF engine and, where vLLM
  is importable, on vLLM (dummy weights on CUDA), with sleep/wake times on CUDA;
- ``verdict.py``: measured/planned ratio per item of ``populora plan`` and the verdict per preset;
- ``report.py``: the JSON and markdown reports; ``run.py`` wires the stages.
"""
