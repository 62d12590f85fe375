"""``tiny``: a random-init Qwen2 causal LM with a byte-level BPE tokenizer, built in seconds.

It is the model of the CPU tests and of ``configs/tiny.yaml``: a few MB, no download, no hub.
Nothing it writes is meaningful text; it exists so that every code path (adapters, batched
generation, training, evolution, checkpoints) runs end to end on any machine.

Determinism:
- the weights depend only on ``seed`` and the ``TinyConfig`` (each parameter is drawn from its
  own generator seeded by ``seed`` and the parameter's name, in a fixed order);
- the tokenizer depends on the BPE trainer of the ``tokenizers`` library and on the text of a
  fixed, sorted list of Python standard-library source files (``CORPUS_FILES``) of the running
  interpreter, so it can differ between Python versions (and ``tokenizers`` versions). Same seed,
  same interpreter -> same bytes, which the cache key and the tests rely on.
"""

from __future__ import annotations

import hashlib
import json
import sysconfig
from dataclasses import asdict, dataclass
from pathlib import Path

from populora.policy.models.cache import build_atomically, cache_dir

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

# Qwen2's pre-tokenizer split (the same regex as transformers' Qwen2Tokenizer). ``AutoTokenizer``
# loads a ``qwen2`` model directory with Qwen2Tokenizer, which rebuilds its own NFC normalizer and
# pre-tokenizer around our vocabulary; training with the identical pipeline keeps every loader
# (ours, AutoTokenizer, vLLM) tokenizing the same way.
QWEN2_SPLIT = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
TOKENIZER_VERSION = 2  # part of the cache key: bump when the tokenizer recipe changes

# ChatML, as used by Qwen2 and SmolLM2 (without a default system message).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Standard-library modules the tokenizer is trained on: plain, long-lived Python files present in
# every CPython 3.10+ (sorted; missing files are skipped, which changes the tokenizer, not the model).
CORPUS_FILES = tuple(
    sorted(
        [
            "abc.py", "argparse.py", "ast.py", "bisect.py", "calendar.py", "collections/__init__.py",
            "colorsys.py", "csv.py", "dataclasses.py", "datetime.py", "decimal.py", "difflib.py",
            "enum.py", "fractions.py", "functools.py", "heapq.py", "inspect.py", "json/decoder.py",
            "json/encoder.py", "keyword.py", "operator.py", "pprint.py", "random.py", "re/__init__.py",
            "shlex.py", "statistics.py", "string.py", "textwrap.py", "tokenize.py", "typing.py",
        ]
    )
)


@dataclass(frozen=True)
class TinyConfig:
    """Shape of the ``tiny`` model; the defaults give ~0.9M parameters."""

    hidden_size: int = 128
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 256
    vocab_size: int = 4096
    max_position_embeddings: int = 8192
    init_std: float = 0.02

    def key(self, seed: int) -> str:
        """Cache directory name: seed plus a short digest of the shape."""
        digest = hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:10]
        return f"tiny-s{seed}-t{TOKENIZER_VERSION}-{digest}"


def corpus_paths() -> list[Path]:
    """The existing standard-library files of ``CORPUS_FILES``, in sorted order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    paths = [root / rel for rel in CORPUS_FILES if (root / rel).is_file()]
    if not paths:
        raise FileNotFoundError(f"no Python standard-library sources found under {root} to train the tiny tokenizer")
    return paths


def train_tokenizer(vocab_size: int):
    """A byte-level BPE ``PreTrainedTokenizerFast`` with ChatML specials, trained on the stdlib."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = [p.read_text(encoding="utf-8") for p in corpus_paths()]
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def init_weights(model, seed: int, std: float) -> None:
    """Seeded init that depends only on ``seed`` and each parameter's name and shape.

    Not ``torch.manual_seed`` + the library's own init: that would tie the bytes to the
    initialisation code of a particular transformers version.
    """
    import torch

    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                param.fill_(1.0)
                continue
            name_seed = int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "little")
            gen = torch.Generator().manual_seed(name_seed)
            param.copy_(torch.randn(param.shape, generator=gen) * std)


def build_tiny(target: Path, seed: int = 0, config: TinyConfig = TinyConfig()) -> Path:
    """Build the tiny model + tokenizer into ``target`` atomically (no-op if already complete)."""

    def build(tmp: Path) -> None:
        import torch
        from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

        tokenizer = train_tokenizer(config.vocab_size)
        if len(tokenizer) > config.vocab_size:
            raise ValueError(f"tiny tokenizer has {len(tokenizer)} tokens > vocab_size {config.vocab_size}")
        ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
        hf_config = Qwen2Config(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            intermediate_size=config.intermediate_size,
            num_hidden_layers=config.num_hidden_layers,
            num_attention_heads=config.num_attention_heads,
            num_key_value_heads=config.num_key_value_heads,
            max_position_embeddings=config.max_position_embeddings,
            tie_word_embeddings=True,
            bos_token_id=ids["<|endoftext|>"],
            eos_token_id=ids["<|im_end|>"],
            pad_token_id=ids["<|endoftext|>"],
            initializer_range=config.init_std,
        )
        model = Qwen2ForCausalLM(hf_config).to(torch.float32)
        init_weights(model, seed, config.init_std)
        model.generation_config = GenerationConfig(
            eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]], pad_token_id=ids["<|endoftext|>"]
        )
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)

    return build_atomically(Path(target), build)


def prepare_tiny(seed: int = 0, config: TinyConfig = TinyConfig(), root: Path | None = None) -> Path:
    """The cached tiny model directory for ``seed``/``config`` (built on first use)."""
    root = Path(root) if root is not None else cache_dir()
    return build_tiny(root / "models" / config.key(seed), seed, config)
