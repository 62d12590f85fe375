"""``HFBackend``: one frozen transformers base model with N named peft LoRA adapters.

- Generation: every request of a ``generate`` call, whatever its adapter, is decoded in the same
  batched forward passes; each LoRA layer applies each row's own adapter in one product over the
  stacked weights of the call's adapters (``multi_lora.py``, the module the fused update runs
  through; rows of the bare base get no LoRA term). See ``decode.py`` for the loop.
- Training: ``completion_logprobs`` activates one adapter and returns differentiable per-token
  log-probabilities; only that adapter's LoRA parameters are in the autograd graph, so the base
  (frozen, ``requires_grad=False``) and every other adapter receive no gradient.
  ``optimizer_step`` runs backward, clips and steps that adapter's own AdamW.
- Memory of a training forward: no KV cache; the vocabulary projection, log-softmax and entropy
  run on the completion tokens only, ``logits_chunk`` tokens at a time, forward and backward
  (``chunked_logprobs.py``); optional gradient checkpointing of the decoder layers.
- Device and dtype come from ``PolicyConfig`` (CPU float32, CUDA bfloat16). LoRA layers compute
  in ``adapter_dtype`` (``auto`` = the base dtype); when that is below float32, each adapter also
  has float32 master weights, which its AdamW steps (so updates are not rounded to bf16) and which
  ``get_weights``/``set_weights`` read and write.
"""

from __future__ import annotations

import os
import random
import warnings
from collections.abc import Sequence
from contextlib import contextmanager

import torch

from populora.cpus import cpu_share
from populora.policy.adapters import AdapterMismatchError, AdapterWeights, check_uniform_rank
from populora.policy.base import (
    GenerationRequest,
    GenerationResult,
    PolicyBackend,
    SamplingParams,
    TokenLogprobs,
    UnknownAdapter,
)
from populora.policy.chunked_logprobs import token_logprobs
from populora.policy.config import PolicyConfig
from populora.policy.decode import Row, decode_rows, to_completion
from populora.policy.kv_cache import new_cache
from populora.policy.multi_lora import MultiLoRA, SlotLayout

BASE = "__base__"  # a row of the bare base model in a mixed batch (peft's name for it)


class HFBackend(PolicyBackend):
    """Transformers + peft backend. ``HFBackend(PolicyConfig(model="tiny"))``.

    ``adamw``: keyword arguments of every adapter's ``torch.optim.AdamW`` (default: ``RLConfig``'s).
    """

    def __init__(self, config: PolicyConfig | None = None, *, adamw=None, model=None, tokenizer=None) -> None:
        self.config = config or PolicyConfig()
        if adamw is None:
            from populora.rl.config import RLConfig

            adamw = RLConfig().adamw_kwargs()
        self.adamw = dict(adamw)
        torch.set_num_threads(self.config.cpu_threads or cpu_share(os.environ))
        if model is None:
            from populora.policy.models import load_base

            model, tokenizer = load_base(self.config.model, self.config.device, self.config.dtype)
        self.base = model
        self.tokenizer = tokenizer
        if self.config.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.device = next(model.parameters()).device
        self.logits_chunk = self.config.logits_chunk
        self.adapter_dtype = _adapter_dtype(self.config.adapter_dtype, next(model.parameters()).dtype)
        self._peft = None  # peft.PeftModel once the first adapter exists
        self._adapters: dict[str, AdapterWeights] = {}  # name -> spec (rank, alpha, targets), not live weights
        self._params: dict[str, list[tuple[str, torch.nn.Parameter, torch.nn.Parameter]]] = {}
        # float32 master copies of each adapter's parameters when the LoRA compute dtype is lower
        # (the optimizer steps these; the live bf16 copies in the model follow them)
        self._masters: dict[str, list[torch.Tensor]] = {}
        self._optimizers: dict[str, torch.optim.Optimizer] = {}
        # the multi-adapter forward on the LoRA layers (fused training, mixed generation), with the first adapter
        self._multi: MultiLoRA | None = None
        # each adapter's peft adapter (its slot in every LoRA layer): its own name, unless it took the slot
        # of the adapter it replaced (``replace_adapter``: no peft injection, whose cost grows with the
        # adapters already there)
        self._slots: dict[str, str] = {}
        self._active: str | None = None  # the slot peft's plain forwards use (set by ``_activate``)
        self._trainable = False  # every adapter's LoRA parameters are trainable leaves (peft freezes on changes)
        self._shapes: dict[str, tuple[int, int]] | None = None
        self._host: set[str] = set()  # adapters whose float32 masters stay in host memory (keep_masters_on_host)
        eos = getattr(model.generation_config, "eos_token_id", None)
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        if tokenizer.eos_token_id is not None:
            eos.append(tokenizer.eos_token_id)
        self.eos_ids = set(eos)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(self.eos_ids))

    # -- adapters ---------------------------------------------------------------------------
    def module_shapes(self) -> dict[str, tuple[int, int]]:
        """LoRA target modules of the base: ``{path: (in_features, out_features)}`` (read once: a walk over
        the model's modules, which grow with every adapter peft injects)."""
        if self._shapes is None:
            self._shapes = self._read_module_shapes()
        return dict(self._shapes)

    def _read_module_shapes(self) -> dict[str, tuple[int, int]]:
        targets = set(self.config.lora.target_modules)
        shapes = {}
        for name, mod in self.base.named_modules():
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "base_layer":  # inside a peft wrapper: report the wrapper's path
                name, leaf = name.rsplit(".", 1)[0], name.rsplit(".", 2)[-2]
            if leaf in targets and isinstance(mod, torch.nn.Linear):
                shapes[name] = (mod.in_features, mod.out_features)
        return shapes

    def adapter_names(self) -> list[str]:
        return list(self._adapters)

    def new_adapter_weights(self, seed: int | None = None) -> AdapterWeights:
        """Fresh weights for this base from ``config.lora``, drawn with ``seed`` (default 0)."""
        spec = self.config.lora
        return AdapterWeights.init(
            self.module_shapes(), spec.rank, spec.alpha, b_init=spec.init, b_std=spec.b_std, seed=seed or 0
        )

    def _require(self, name: str) -> None:
        if name not in self._adapters:
            raise UnknownAdapter(f"unknown adapter {name!r}; registered: {sorted(self._adapters)}")

    def add_adapter(self, name: str, weights: AdapterWeights | None = None) -> None:
        """Register ``name`` with ``weights`` (``None``: fresh weights from ``config.lora``)."""
        from peft import LoraConfig, get_peft_model

        if not isinstance(name, str) or not name or "." in name or name == BASE:
            raise ValueError(f"adapter name {name!r} is invalid (non-empty, no '.', not {BASE!r})")
        if name in self._adapters:
            raise ValueError(f"adapter {name!r} already exists")
        weights = weights if weights is not None else self.new_adapter_weights()
        if self._adapters:
            check_uniform_rank({**self._adapters, name: weights})
        shapes = self.module_shapes()
        missing = sorted(set(weights.tensors) - set(shapes))
        if missing:
            raise AdapterMismatchError(
                f"adapter {name!r}: modules {missing[:3]} are not LoRA targets of this base "
                f"(policy.lora.target_modules={list(self.config.lora.target_modules)})"
            )
        lcfg = LoraConfig(
            r=weights.rank,
            lora_alpha=weights.alpha,
            target_modules=sorted(weights.tensors),  # exact module paths
            lora_dropout=0.0,
            bias="none",
        )
        slot = name
        taken = set(self._slots.values())
        while slot in taken:  # a name whose slot another adapter took over (replace_adapter)
            slot += "_"
        if self._peft is None:
            self._peft = get_peft_model(self.base, lcfg, adapter_name=slot, autocast_adapter_dtype=True)
            self._peft.eval()
        else:
            self._inject(slot, lcfg)
        self._slots[name] = slot
        self._sync_active()
        if self._multi is None:
            self._multi = MultiLoRA()
        self._multi.install(self._peft.base_model.model)  # the LoRA layers of new target modules too
        self._multi.forget()  # kept generation stacks are of the adapters before this one
        params = []
        for path in sorted(weights.tensors):
            layer = self._peft.base_model.model.get_submodule(path)
            a, b = layer.lora_A[slot].weight, layer.lora_B[slot].weight
            a.data = a.data.to(self.adapter_dtype)
            b.data = b.data.to(self.adapter_dtype)
            params.append((path, a, b))
        self._params[name] = params
        if self.adapter_dtype != torch.float32:
            where = "cpu" if name in self._host else self.device
            self._masters[name] = [p.detach().to(where, torch.float32) for _, a, b in params for p in (a, b)]
        self._adapters[name] = AdapterWeights(weights.rank, weights.alpha, weights.target_modules, {})
        self._trainable = False  # peft froze the new adapter (it is not the active one)
        try:
            self.set_weights(name, weights)
        except Exception:
            self.remove_adapter(name)
            raise
        self.reset_optimizer(name)

    def _inject(self, slot: str, lcfg) -> None:
        """A further adapter on the LoRA layers that exist already: peft's own step for one layer
        (``LoraModel._create_and_replace``, which calls the layer's ``update_layer``) on each target, without
        ``PeftModel.add_adapter``'s walks over every module of the model, whose count grows with every adapter
        (measured on the tiny model: ~0.02 s more per adapter already there, so 64 founders cost 64^2 walks at
        every start and resume). The same layers, initialisation and scaling as ``add_adapter`` (compared in
        tests/test_population_scale.py); a target that is not a LoRA layer yet takes peft's whole path."""
        from peft.tuners.lora import LoraLayer

        tuner = self._peft.base_model
        model = tuner.model
        targets = [(path, model.get_submodule(path)) for path in lcfg.target_modules]
        if not all(isinstance(layer, LoraLayer) for _, layer in targets):
            self._peft.add_adapter(slot, lcfg)
            return
        self._peft.peft_config[slot] = lcfg
        for path, layer in targets:
            parent, _, leaf = path.rpartition(".")
            tuner._create_and_replace(lcfg, slot, layer, leaf, model.get_submodule(parent), current_key=path)

    def remove_adapter(self, name: str) -> None:
        self._require(name)
        with warnings.catch_warnings():  # peft warns when the active adapter goes; nothing depends on it
            warnings.simplefilter("ignore", UserWarning)
            self._peft.delete_adapter(self._slots[name])
        self._multi.forget()
        del self._adapters[name], self._params[name], self._slots[name]
        self._masters.pop(name, None)
        self._optimizers.pop(name, None)
        self._active, self._trainable = None, False  # peft re-points and re-freezes on a deletion
        self._sync_active()

    def replace_adapter(self, old: str, new: str, weights: AdapterWeights) -> None:
        """``new`` takes ``old``'s place (an evolved child replacing a member, a restored checkpoint's member):
        ``old`` is forgotten, ``new`` has ``weights`` and a fresh optimizer state. ``new`` reuses ``old``'s
        peft slot when the LoRA shape is the same, so its cost does not grow with the number of adapters
        (peft's ``add_adapter`` and ``delete_adapter`` walk every module of the model, each adapter's
        included); otherwise it is ``remove_adapter`` + ``add_adapter``."""
        self._require(old)
        if new in self._adapters and new != old:
            raise ValueError(f"adapter {new!r} already exists")
        spec = self._adapters[old]
        same = (weights.rank, weights.alpha, sorted(weights.tensors)) == (spec.rank, spec.alpha, [p for p, _, _ in self._params[old]])
        if not same:
            self.remove_adapter(old)
            self.add_adapter(new, weights)
            return
        for table in (self._adapters, self._params, self._slots, self._masters):
            if old in table:
                table[new] = table.pop(old)
        if old in self._host:  # the masters stay where they are: the child takes the slot and its ranks
            self._host.discard(old)
            self._host.add(new)
        self._optimizers.pop(old, None)
        self.discard_gradients(new)
        if self._multi is not None:
            self._multi.forget()  # kept generation stacks hold the slot's former weights
        self.set_weights(new, weights)
        self.reset_optimizer(new)

    def keep_masters_on_host(self, names) -> None:
        """The float32 masters of ``names`` (members that other ranks train) live in host memory, every
        other adapter's on the trainer's device. They are read (publishing, evolution, checkpoints) and
        written (the trainer's broadcast), never stepped here, so a rank's GPU holds the compute-dtype
        copies of every member and the masters of its own only (``populora plan`` counts them so). Nothing
        moves with float32 LoRA (no masters). The tensors keep their identity (optimizers hold them)."""
        self._host = set(names)
        for name, masters in self._masters.items():
            where = torch.device("cpu") if name in self._host else self.device
            for m in masters:
                if m.device != where:
                    m.data = m.data.to(where)

    def _sync_active(self) -> None:
        """Keep peft's active adapter pointing at a live one.

        peft only re-points ``PeftModel.active_adapter`` when exactly one adapter is left after a
        deletion; after deleting them all and adding new ones it keeps the stale name, and every
        forward then fails with a KeyError in peft's hooks.
        """
        live = list(self._peft.peft_config) if self._peft is not None else []
        if live and self._peft.active_adapter not in live:
            self._activate(next(n for n, slot in self._slots.items() if slot in live))

    def get_weights(self, name: str) -> AdapterWeights:
        self._require(name)
        spec = self._adapters[name]
        if name in self._masters:  # the float32 masters are the adapter's true weights
            m = self._masters[name]
            tensors = {p: (m[2 * i].cpu().clone(), m[2 * i + 1].cpu().clone()) for i, (p, _, _) in enumerate(self._params[name])}
        else:
            tensors = {p: (a.detach().cpu().clone(), b.detach().cpu().clone()) for p, a, b in self._params[name]}
        return AdapterWeights(spec.rank, spec.alpha, spec.target_modules, tensors)

    def set_weights(self, name: str, weights: AdapterWeights) -> None:
        """Copy ``weights`` into the live adapter (same rank and modules; alpha may not change)."""
        self._require(name)
        spec = self._adapters[name]
        if weights.rank != spec.rank:
            raise AdapterMismatchError(f"adapter {name!r} has rank {spec.rank}, new weights have rank {weights.rank}")
        if weights.alpha != spec.alpha:
            raise AdapterMismatchError(f"adapter {name!r} has alpha {spec.alpha}, new weights have alpha {weights.alpha}")
        live = {p: (a, b) for p, a, b in self._params[name]}
        if set(live) != set(weights.tensors):
            diff = sorted(set(live) ^ set(weights.tensors))[:3]
            raise AdapterMismatchError(f"adapter {name!r}: module sets differ, e.g. {diff}")
        with torch.no_grad():
            for path, (a, b) in weights.tensors.items():
                la, lb = live[path]
                if la.shape != a.shape or lb.shape != b.shape:
                    raise AdapterMismatchError(
                        f"adapter {name!r}, module {path}: shapes {tuple(a.shape)}, {tuple(b.shape)} "
                        f"but the base needs {tuple(la.shape)}, {tuple(lb.shape)}"
                    )
                la.copy_(a.to(la.dtype))
                lb.copy_(b.to(lb.dtype))
            if name in self._masters:
                order = [p for path, _, _ in self._params[name] for p in weights.tensors[path]]
                for master, w in zip(self._masters[name], order):
                    master.copy_(w.to(device=master.device, dtype=torch.float32))

    # -- generation -------------------------------------------------------------------------
    @contextmanager
    def _serving(self, adapters: Sequence[str]):
        """A forward function whose rows each use their own adapter: every LoRA layer computes the rows
        of all ``adapters`` in one product over their stacked weights (``multi_lora.py``, the module the
        fused update runs through); rows of the bare base (``BASE``) get no LoRA term. Rows must come
        grouped by adapter in the order of ``adapters``, base rows last (``generate`` sorts them)."""
        model = self._peft.base_model.model if self._peft is not None else self.base

        def forward(input_ids, mask, positions, past, names):
            if self._multi is not None:
                self._multi.route(names)
            out = model(
                input_ids=input_ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=past,
                use_cache=True,
                logits_to_keep=1,
            )
            return out.logits[:, -1, :], out.past_key_values

        if self._multi is None:
            yield forward
            return
        with self._multi.serving(adapters, base_name=BASE):
            yield forward

    @torch.no_grad()
    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingParams) -> list[GenerationResult]:
        """All requests, all adapters, ``n`` samples each, in batched passes of ``max_batch_size`` rows."""
        for req in requests:
            if req.adapter is not None:
                self._require(req.adapter)
        seed = sampling.seed if sampling.seed is not None else random.SystemRandom().randrange(1 << 62)
        prompts = [self.encode(r.prompt) for r in requests]
        for i, p in enumerate(prompts):
            if not p:
                raise ValueError(f"request {i}: empty prompt")
        rows = [
            Row(i, s, prompts[i], self._slots[req.adapter] if req.adapter is not None else BASE, seed_index=req.index)
            for i, req in enumerate(requests)
            for s in range(sampling.n)
        ]
        # longest prompts first: less padding per micro-batch; results do not depend on the grouping.
        # Within a micro-batch the rows are grouped by adapter (base rows last): each LoRA layer's
        # slots are then consecutive blocks of rows
        order = sorted(range(len(rows)), key=lambda k: -len(rows[k].prompt_ids))
        served = list(dict.fromkeys(row.adapter for row in rows if row.adapter != BASE))  # peft slots
        slot = {name: s for s, name in enumerate(served)}
        size = self.config.max_batch_size
        with self._serving(served) as forward:
            for start in range(0, len(order), size):
                chunk = sorted((rows[k] for k in order[start : start + size]),
                               key=lambda r: slot.get(r.adapter, len(slot)))
                decode_rows(
                    forward,
                    chunk,
                    sampling,
                    tokenizer=self.tokenizer,
                    pad_id=self.pad_id,
                    eos_ids=self.eos_ids,
                    device=self.device,
                    base_seed=seed,
                    new_cache=new_cache(self.config.kv_cache, self.base.config),
                )
        results = [GenerationResult(prompt_token_ids=list(p)) for p in prompts]
        for row in rows:
            results[row.request_index].completions.append(to_completion(row))
        return results

    # -- training ---------------------------------------------------------------------------
    def _activate(self, name: str) -> None:
        """Make ``name`` the adapter of plain forwards; all LoRA weights stay trainable leaves. peft's switch
        walks every adapter of every layer, so it runs only when the adapter changes."""
        if self._multi is not None:
            self._multi.clear()  # plain peft forwards from here on
            self._multi.forget()  # no stacked generation weights beside a training pass
        slot = self._slots[name]
        if self._active != slot:
            self._peft.base_model.set_adapter(slot)
            self._peft.active_adapter = slot  # PeftModel keeps its own copy of the name
            self._active, self._trainable = slot, False
        self._make_trainable()

    def _make_trainable(self) -> None:
        """Undo peft's freezing of inactive adapters (after an injection, a deletion or a switch)."""
        if self._trainable:
            return
        for params in self._params.values():
            for _, a, b in params:
                a.requires_grad_(True)
                b.requires_grad_(True)
        self._trainable = True

    @contextmanager
    def _checkpointing(self):
        """Train mode for a pass whose layers are checkpointed (transformers checkpoints only in train
        mode; dropout is 0 in LoRA and in the supported bases, so train mode changes nothing else).
        Without checkpointing the model stays in eval mode and no walk over its modules is made (each
        ``train()``/``eval()`` walks every module: ~13 ms a pass on the tiny model, measured)."""
        if not self.config.gradient_checkpointing:
            yield
            return
        self._peft.train(True)
        try:
            yield
        finally:
            self._peft.eval()

    def _logprobs_pass(self, prompt_ids, completion_ids, with_entropy: bool):
        """One forward over ``[prompt | completion | right pad]`` rows; see ``completion_logprobs``.

        The decoder runs without a KV cache; the vocabulary projection, log-softmax and entropy
        run only on the hidden states of the positions that predict a completion token, a chunk
        of ``logits_chunk`` tokens at a time (``chunked_logprobs.py``): no ``[B, T, V]`` tensor
        exists, in the forward or the backward pass.
        """
        lens = [len(c) for c in completion_ids]
        starts = [len(p) for p in prompt_ids]  # position of each row's first completion token
        width = max(s + n for s, n in zip(starts, lens))
        t_max = max(lens)
        # RIGHT padding: with causal attention no real token can see the padding after it, so no
        # attention mask is needed (none is materialized per layer, and SDPA may use its causal
        # flash kernels); padded positions produce values that are never read.
        ids = torch.full((len(lens), width), self.pad_id, dtype=torch.long)
        for i, (p, c) in enumerate(zip(prompt_ids, completion_ids)):
            ids[i, : starts[i] + lens[i]] = torch.tensor(list(p) + list(c), dtype=torch.long)
        ids = ids.to(self.device)
        model = self._peft.base_model.model  # the causal LM with the LoRA layers injected
        hidden = model.get_decoder()(input_ids=ids, use_cache=False).last_hidden_state
        lens_t = torch.tensor(lens, device=self.device)
        t = torch.arange(t_max, device=self.device)
        valid = t[None, :] < lens_t[:, None]  # [B, t_max], completions aligned at token 0
        rows, cols = valid.nonzero(as_tuple=True)
        pos = torch.tensor(starts, device=self.device)[rows] + cols  # position of completion token (row, col)
        head = self._output_head()
        logp_flat, ent_flat = token_logprobs(
            hidden[rows, pos - 1], head.weight, ids[rows, pos],  # position k predicts token k + 1
            bias=head.bias, chunk=self.logits_chunk, with_entropy=with_entropy,
        )
        shape = (len(lens), t_max)
        logp = torch.zeros(shape, dtype=torch.float32, device=self.device).index_put((rows, cols), logp_flat)
        entropy = None
        if with_entropy:
            entropy = torch.zeros(shape, dtype=torch.float32, device=self.device).index_put((rows, cols), ent_flat)
        return logp, valid, entropy

    def _output_head(self) -> torch.nn.Linear:
        """The base's vocabulary projection, checked to be a plain linear map of the final hidden state."""
        model = self._peft.base_model.model
        head = model.get_output_embeddings()
        if not isinstance(head, torch.nn.Linear):
            raise ValueError(
                f"the output head of {self.config.model!r} is a {type(head).__name__}, not a plain linear layer "
                "(is lm_head a LoRA target?); policy.lora.target_modules must not include it"
            )
        for key in ("final_logit_softcapping", "logit_scale"):
            if getattr(model.config, key, None) not in (None, 1.0):
                raise ValueError(f"base {self.config.model!r} sets {key}; completion_logprobs does not apply it")
        return head

    def completion_logprobs(
        self,
        adapter: str,
        prompt_ids: Sequence[Sequence[int]],
        completion_ids: Sequence[Sequence[int]],
        *,
        with_grad: bool = True,
        with_entropy: bool = False,
    ) -> TokenLogprobs:
        """Per-token log p(completion | prompt) under ``adapter``: ``[B, T]`` aligned at token 0.

        Raw model distribution (temperature 1, no top-p): the same quantity ``generate`` returns.
        With ``with_grad`` the whole batch is one differentiable pass (micro-batch in the caller
        and call ``loss.backward()`` per micro-batch to bound memory); without, it runs in chunks
        of ``config.train_micro_batch``.
        """
        self._require(adapter)
        if len(prompt_ids) != len(completion_ids) or not completion_ids:
            raise ValueError(f"need equal, non-zero numbers of prompts and completions, got {len(prompt_ids)} and {len(completion_ids)}")
        if any(len(c) == 0 for c in completion_ids) or any(len(p) == 0 for p in prompt_ids):
            raise ValueError("every prompt and every completion needs at least one token")
        self._activate(adapter)
        if with_grad:
            with self._checkpointing():
                logp, valid, ent = self._logprobs_pass(prompt_ids, completion_ids, with_entropy)
            return TokenLogprobs(logp, valid, ent)
        t_max = max(len(c) for c in completion_ids)
        parts = []
        step = self.config.train_micro_batch
        with torch.no_grad():
            for s in range(0, len(completion_ids), step):
                logp, valid, ent = self._logprobs_pass(prompt_ids[s : s + step], completion_ids[s : s + step], with_entropy)
                pad = t_max - logp.shape[1]
                parts.append(tuple(None if x is None else torch.nn.functional.pad(x, (0, pad)) for x in (logp, valid, ent)))
        cat = [None if parts[0][k] is None else torch.cat([p[k] for p in parts]) for k in range(3)]
        return TokenLogprobs(cat[0], cat[1], cat[2])

    def fused_logprobs(self, adapters: Sequence[str], prompt_ids: Sequence[Sequence[int]],
                       completion_ids: Sequence[Sequence[int]], *, with_entropy: bool = False) -> TokenLogprobs:
        """Differentiable per-token log-probabilities where row ``i`` runs under ``adapters[i]``: rows of
        several adapters in ONE forward pass (``multi_lora.py``: each LoRA layer applies each row's own
        adapter; gradients reach each row's adapter only). Same result layout as ``completion_logprobs``.

        The rows are grouped by adapter for the pass and put back in the caller's order. The fused
        layout stays on the LoRA layers until the next plain forward, so a layer recomputed by gradient
        checkpointing in the caller's ``backward`` sees the same rows.
        """
        if len(adapters) != len(prompt_ids) or len(prompt_ids) != len(completion_ids) or not completion_ids:
            raise ValueError(f"need one adapter, prompt and completion per row, got {len(adapters)}, "
                             f"{len(prompt_ids)} and {len(completion_ids)}")
        if any(len(c) == 0 for c in completion_ids) or any(len(p) == 0 for p in prompt_ids):
            raise ValueError("every prompt and every completion needs at least one token")
        first: dict[str, int] = {}
        for a in adapters:
            self._require(a)
            first.setdefault(a, len(first))
        order = sorted(range(len(adapters)), key=lambda i: first[adapters[i]])  # stable: grouped by adapter
        self._make_trainable()  # every adapter's parameters trainable leaves (the active one does not matter)
        if self._multi is None:
            self._multi = MultiLoRA()
            self._multi.install(self._peft.base_model.model)
        self._multi.forget()  # no stacked generation weights beside a training pass
        self._multi.set(SlotLayout.of([self._slots[adapters[i]] for i in order]))
        with self._checkpointing():
            logp, valid, ent = self._logprobs_pass([prompt_ids[i] for i in order], [completion_ids[i] for i in order],
                                                   with_entropy)
        back = torch.empty(len(order), dtype=torch.long)
        back[torch.tensor(order)] = torch.arange(len(order))
        back = back.to(logp.device)
        return TokenLogprobs(logp[back], valid[back], None if ent is None else ent[back])

    def trainable_parameters(self, adapter: str) -> list[torch.nn.Parameter]:
        """The live LoRA parameters of ``adapter`` in the model (A and B of each module, sorted by
        module path), in the adapter compute dtype; backward puts the gradients here."""
        self._require(adapter)
        return [p for _, a, b in self._params[adapter] for p in (a, b)]

    def _optimized(self, adapter: str) -> list[torch.Tensor]:
        """What the optimizer steps: the float32 masters, or the live parameters when those are float32."""
        return self._masters.get(adapter) or self.trainable_parameters(adapter)

    def optimizer_step(self, adapter: str, loss: torch.Tensor | None, *, max_grad_norm: float | None = None) -> float:
        """``loss.backward()`` (skip with ``loss=None`` if gradients were accumulated already),
        clip to ``max_grad_norm``, one AdamW step on ``adapter``, zero its gradients; returns the
        pre-clip gradient norm.

        With a lower-precision LoRA compute dtype the gradients are moved to the float32 masters,
        clipped and stepped there, and the live parameters take the rounded new masters.
        """
        live = self.trainable_parameters(adapter)
        if loss is not None:
            loss.backward()
        if all(p.grad is None for p in live):
            raise RuntimeError(f"adapter {adapter!r} has no gradient: was the loss computed with completion_logprobs({adapter!r}, ...)?")
        params = self._optimized(adapter)
        masters = adapter in self._masters
        if masters:
            for master, p in zip(params, live):
                master.grad = None if p.grad is None else p.grad.float()
                p.grad = None
        norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm if max_grad_norm is not None else float("inf"))
        self._optimizers[adapter].step()
        self._optimizers[adapter].zero_grad(set_to_none=True)
        if masters:
            with torch.no_grad():
                for master, p in zip(params, live):
                    p.copy_(master)
        return float(norm)

    def discard_gradients(self, adapter: str) -> None:
        for p in self.trainable_parameters(adapter) + self._masters.get(adapter, []):
            p.grad = None

    def optimizer_state(self, adapter: str) -> dict:
        """A snapshot (CPU copies) of the adapter's AdamW state; later steps do not change it."""
        self._require(adapter)

        def snapshot(x):
            if isinstance(x, torch.Tensor):
                return x.detach().to("cpu", copy=True)
            if isinstance(x, dict):
                return {k: snapshot(v) for k, v in x.items()}
            if isinstance(x, list):
                return [snapshot(v) for v in x]
            return x

        return snapshot(self._optimizers[adapter].state_dict())

    def load_optimizer_state(self, adapter: str, state: dict) -> None:
        self._require(adapter)
        self._optimizers[adapter].load_state_dict(state)

    def reset_optimizer(self, adapter: str) -> None:
        self._require(adapter)
        self._optimizers[adapter] = torch.optim.AdamW(self._optimized(adapter), **self.adamw)

    def set_learning_rate(self, adapter: str, lr: float) -> None:
        """Change one adapter's learning rate (schedules, PBT hyper-parameter mutation)."""
        self._require(adapter)
        for group in self._optimizers[adapter].param_groups:
            group["lr"] = lr

    def close(self) -> None:
        self._optimizers.clear()


def _adapter_dtype(name, base_dtype: torch.dtype) -> torch.dtype:
    """The LoRA compute dtype: ``auto`` = the base's dtype (bf16 on GPU, float32 on CPU).

    In the base dtype, a LoRA layer's input is the very tensor its base layer saves for backward;
    float32 LoRA on a bf16 base makes a float32 copy of every projection's input (Qwen2.5-7B:
    ~314 instead of ~207 KiB of activations per token and layer). The optimizer always steps
    float32 masters, so updates are not rounded to the compute dtype.
    """
    if name in (None, "", "auto"):
        return base_dtype
    dtype = getattr(torch, str(name), None)
    if dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"policy.adapter_dtype must be auto, float32, bfloat16 or float16, got {name!r}")
    return dtype
