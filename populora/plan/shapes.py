"""The shape of a base model, read without its weights: ``config.json`` or a shipped table.

:func:`model_shape` looks, in order, at a local model directory's ``config.json``, the user's
Hugging Face cache (the ``config.json`` of a downloaded snapshot, offline), the embedded models
(``tiny``'s own config, ``smollm2-135m``'s converted config), then a table of known bases. No
weights are read and nothing is downloaded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from populora.policy.models.shapes import QWEN25_7B

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class UnknownModelShape(ValueError):
    """The base's shape cannot be found without loading it; the message says what was tried."""


@dataclass(frozen=True)
class ModelShape:
    """Architecture numbers of a Qwen2 / Llama-style decoder (the supported bases)."""

    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    tied_embeddings: bool
    qkv_bias: bool  # Qwen2 has biases on q, k, v; Llama does not
    source: str = ""  # where the numbers came from, for the plan's header

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def projection_dims(self) -> dict[str, tuple[int, int]]:
        """``{projection: (in_features, out_features)}`` of one decoder layer."""
        h, i, q, kv = self.hidden, self.intermediate, self.q_dim, self.kv_dim
        return {
            "q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
            "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h),
        }

    def n_params(self) -> int:
        """Parameters of the base: embeddings (+ untied head), decoder layers, final norm."""
        h = self.hidden
        per_layer = sum(a * b for a, b in self.projection_dims().values()) + 2 * h  # + two RMSNorms
        if self.qkv_bias:
            per_layer += self.q_dim + 2 * self.kv_dim
        embed = self.vocab * h * (1 if self.tied_embeddings else 2)
        return embed + self.layers * per_layer + h


def shape_from_config(cfg: dict, source: str) -> ModelShape:
    """A ``ModelShape`` from a transformers ``config.json`` mapping; names the missing key."""
    cfg = cfg.get("text_config", cfg)
    try:
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        return ModelShape(
            vocab=int(cfg["vocab_size"]),
            hidden=hidden,
            intermediate=int(cfg["intermediate_size"]),
            layers=int(cfg["num_hidden_layers"]),
            heads=heads,
            kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=cfg.get("model_type") == "qwen2" or bool(cfg.get("attention_bias", False)),
            source=source,
        )
    except KeyError as e:
        raise UnknownModelShape(f"{source}: key {e.args[0]!r} missing from the model config") from None
    except (TypeError, ValueError) as e:
        raise UnknownModelShape(f"{source}: {e}") from None


def _smollm2() -> dict:
    # SmolLM2-135M-Instruct's config.json (architecture fields), as the embedded model converts it
    return dict(model_type="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                num_attention_heads=9, num_key_value_heads=3, head_dim=64, tie_word_embeddings=True)


def _tiny() -> dict:
    from dataclasses import asdict

    from populora.policy.models.tiny import TinyConfig

    tc = asdict(TinyConfig())
    keys = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads")
    return dict(model_type="qwen2", tie_word_embeddings=True, **{k: tc[k] for k in keys})


# Known bases by lower-case name (a Hugging Face id's part after the slash, or an embedded name).
# Qwen2.5-7B and Qwen2.5-Coder-7B (and their -Instruct) share one architecture (their config.json).
KNOWN: dict[str, dict] = {
    **{name: dict(model_type="qwen2", **QWEN25_7B) for name in (
        "qwen2.5-7b", "qwen2.5-7b-instruct", "qwen2.5-coder-7b", "qwen2.5-coder-7b-instruct", "qwen2.5-7b-shape")},
    "smollm2-135m": _smollm2(),
    "smollm2-135m-instruct": _smollm2(),
}


def _hf_cache_config(repo_id: str) -> Path | None:
    """``config.json`` of ``repo_id`` in the local Hugging Face cache, if downloaded (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # an id that is not a valid repo name: simply not in the cache
        return None
    return Path(found) if isinstance(found, str) else None


def model_shape(name: str) -> ModelShape:
    """The shape of base ``name`` (an embedded name, a local directory or a Hugging Face id)."""
    name = str(name)
    path = Path(name).expanduser()
    if (path / "config.json").is_file():
        return _read(path / "config.json")
    if name == "tiny" or name.startswith("tiny:"):
        return shape_from_config(_tiny(), "the embedded tiny model")
    if "/" in name and not name.startswith((".", "/", "~")):
        cached = _hf_cache_config(name)
        if cached is not None:
            return _read(cached)
    key = name.rstrip("/").rsplit("/", 1)[-1].lower()
    if key in KNOWN:
        return shape_from_config(KNOWN[key], f"the table of known bases ({key})")
    raise UnknownModelShape(
        f"model {name!r}: no config.json at that path, not in the Hugging Face cache, and not a known base "
        f"({', '.join(['tiny'] + sorted(KNOWN))}); give a local model directory"
    )


def _read(path: Path) -> ModelShape:
    try:
        cfg = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise UnknownModelShape(f"{path}: cannot read the model config ({e})") from None
    return shape_from_config(cfg, str(path))
