"""A model with a preset's architecture and random weights: nothing is downloaded or read but configs.

The architecture is found as ``populora plan`` finds the shape (``plan/shapes.py``): a local model
directory's ``config.json``, the embedded ``tiny`` model, a ``config.json`` in the Hugging Face cache
(offline), or the table of known bases (Qwen2.5-7B's for the 7B presets). ``tiny`` is itself a
random-init model built locally, so it is loaded as is; any other base is built with
``AutoModelForCausalLM.from_config`` directly on the device, seeded. The tokenizer is always tiny's
(its 4k ids fall inside every supported vocabulary): the doctor's token ids are random anyway.
"""

from __future__ import annotations

from pathlib import Path

from populora.plan.shapes import KNOWN, UnknownModelShape


def is_tiny(name: str) -> bool:
    return name == "tiny" or name.startswith("tiny:")


def model_config(name: str):
    """``(transformers config, where it came from)`` of base ``name``; no weights are read."""
    from transformers import AutoConfig

    from populora.policy.models import resolve_model

    name = str(name)
    path = Path(name).expanduser()
    if (path / "config.json").is_file():
        return AutoConfig.from_pretrained(path), str(path / "config.json")
    if is_tiny(name):
        return AutoConfig.from_pretrained(resolve_model(name)), "the embedded tiny model"
    if "/" in name and not name.startswith((".", "/", "~")):
        try:
            return AutoConfig.from_pretrained(name, local_files_only=True), "config.json in the Hugging Face cache"
        except (OSError, ValueError):
            pass
    key = name.rstrip("/").rsplit("/", 1)[-1].lower()
    if key in KNOWN:
        fields = dict(KNOWN[key])
        return AutoConfig.for_model(fields.pop("model_type"), **fields), f"the table of known bases ({key})"
    raise UnknownModelShape(f"model {name!r}: no config.json at that path, not in the Hugging Face cache, "
                            "and not a known base; give a local model directory (only its config.json is read)")


def tiny_tokenizer():
    from transformers import AutoTokenizer

    from populora.policy.models.tiny import prepare_tiny

    tokenizer = AutoTokenizer.from_pretrained(prepare_tiny(0))
    tokenizer.padding_side = "left"
    return tokenizer


def random_model(name: str, device: str, dtype: str, seed: int = 0):
    """``(model, tokenizer, source)``: base ``name``'s architecture with random weights on ``device``,
    frozen and in eval mode (as ``load_base`` returns a base)."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    from populora.policy.models import load_base, resolve_device_dtype

    if is_tiny(name):
        model, tokenizer = load_base(name, device, dtype)
        return model, tokenizer, "the embedded tiny model (random init)"
    config, source = model_config(name)
    tokenizer = tiny_tokenizer()
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|im_end|>")}
    config.eos_token_id, config.pad_token_id = ids["<|im_end|>"], ids["<|endoftext|>"]
    torch_device, torch_dtype = resolve_device_dtype(device, dtype)
    torch.manual_seed(seed)
    with torch.device(torch_device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    model.generation_config = GenerationConfig(eos_token_id=[ids["<|im_end|>"]], pad_token_id=ids["<|endoftext|>"])
    model.eval().requires_grad_(False)
    return model, tokenizer, source


def write_model_dir(name: str, path: Path) -> Path:
    """A directory vLLM can start from with ``load_format="dummy"``: ``name``'s config.json and tiny's
    tokenizer (no weights)."""
    config, _ = model_config(name)
    tokenizer = tiny_tokenizer()
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|im_end|>")}
    config.eos_token_id, config.pad_token_id = ids["<|im_end|>"], ids["<|endoftext|>"]
    if not getattr(config, "architectures", None):  # a config built from the table names no class; vLLM needs one
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

        config.architectures = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config.model_type]]
    path.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
