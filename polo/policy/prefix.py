"""Prompt sharing: the G samples of a prompt share one forward pass over it.

A GRPO batch holds each prompt G times. Causal attention makes a prompt's keys and values the same in all
G rows, so each *distinct* prompt is run once into a KV cache, the cache is expanded to all B rows by
indexing (differentiable: gradients from the G continuations add up on the shared prompt), and only the
continuations are run on the full batch. Token positions computed drop from ``B·(Tp + T)`` to
``U·Tp + B·T`` (U distinct prompts); results equal one forward over ``prompt ++ continuation``.
``read_after_prompt`` can run packed rows instead (polo.policy.packing), where they compute fewer positions.
"""
from __future__ import annotations

import inspect
from contextlib import AbstractContextManager, nullcontext
from typing import Callable

import torch
from torch import Tensor
from torch.distributed.fsdp import FSDPModule
from transformers import DynamicCache, LlamaForCausalLM

from polo.policy.inputs import concat_inputs, positions, trim_left_padding
from polo.policy.kv_cache import reserved_cache
from polo.policy.packing import PackedRows, PackRows, varlen_attention

# transformers 5 renamed ``past_key_values`` to ``cache``
CACHE_ARG = "cache" if "cache" in inspect.signature(LlamaForCausalLM.forward).parameters else "past_key_values"


def new_cache(model) -> DynamicCache:
    return DynamicCache(config=model.config)


def hash_weights(width: int, device) -> Tensor:
    """Fixed random int64 weights: ``row · w`` (wrapping modulo 2^64) is a hash of an integer row."""
    return torch.randint(1, 2**62, (width,), generator=torch.Generator().manual_seed(width)).to(device)


def distinct_prompts(prompt_ids: Tensor, prompt_mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(ids [U, Tp], mask [U, Tp], inverse [B])``: the distinct (ids, mask) rows, row b being ``inverse[b]``.

    Rows are grouped by a hash (a 1-D ``unique``, ~15× faster than ``unique(dim=0)``); the grouping is
    checked exactly and a hash collision falls back to ``unique(dim=0)``.
    """
    Tp = prompt_ids.shape[1]
    rows = torch.cat([prompt_ids, prompt_mask.to(prompt_ids)], 1)
    keys, inverse = torch.unique((rows * hash_weights(rows.shape[1], rows.device)).sum(1), return_inverse=True)
    order = torch.arange(len(rows), device=rows.device)
    if len(keys) == len(rows):  # distinct hashes, distinct rows: keep the batch's own order
        return prompt_ids, prompt_mask, order
    distinct = rows[torch.full_like(keys, len(rows)).scatter_reduce_(0, inverse, order, "amin")]  # first of each
    if not torch.equal(distinct[inverse], rows):
        distinct, inverse = torch.unique(rows, dim=0, return_inverse=True)
    return distinct[:, :Tp], distinct[:, Tp:], inverse


def prefill(model, distinct: tuple[Tensor, Tensor, Tensor], cache: DynamicCache, **kwargs):
    """Run each distinct prompt (``distinct_prompts``' output) once into ``cache``, then expand the cache to
    one row per prompt of the batch. Returns the model output over the U distinct prompts; row b's outputs
    are at ``inverse[b]``.
    """
    ids, mask, inverse = distinct
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions(mask), use_cache=True,
                **{CACHE_ARG: cache}, **kwargs)
    if len(ids) < len(inverse):
        cache.batch_select_indices(inverse)
    return out


class CachedDecoder:
    """Incremental decoding with a KV cache: ``prefill`` the prompts, then one ``step`` per token; each returns
    the next-token logits ``[rows, V]``. ``select`` keeps the given rows (finished rows leave the batch). With
    ``keep_hidden`` set, ``prefill`` also keeps ``hidden`` ``[rows, d]``: the last layer's state at each prompt's
    last token (the position whose logits give the first new token). ``new_tokens``: the steps that will follow
    the prefill, for which the cache reserves room (polo.policy.kv_cache; more grow it). ``precision`` gives the
    context every model call runs in (the policy's mixed precision); ``step_model`` the module the one-token steps
    call (the model itself, or a compiled version of it: ``Policy.decode_step_model``)."""

    def __init__(self, model, hf_model, precision: Callable[[], AbstractContextManager] = nullcontext,
                 step_model=None):
        if drops_cache(model):
            raise RuntimeError("KV-cached decoding with gradient checkpointing in training mode: the layers would "
                               "drop the cache; call policy.eval() before sampling")
        self.model, self.config, self.precision = model, hf_model.config, precision
        self.step_model = model if step_model is None else step_model
        self.keep_hidden, self.hidden, self.new_tokens = False, None, 0

    def prefill(self, distinct: tuple[Tensor, Tensor, Tensor], **inputs: Tensor) -> Tensor:
        """Logits after each prompt of the batch, from ``distinct_prompts``' output (shared prefills); ``inputs``:
        the distinct prompts' further model inputs (e.g. ``pixel_values``)."""
        self.cache = reserved_cache(self.config, self.new_tokens)
        with self.precision():
            out = prefill(self.model, distinct, self.cache, logits_to_keep=1, output_hidden_states=self.keep_hidden,
                          **inputs)
        if self.keep_hidden:
            self.hidden = out.hidden_states[-1][:, -1][distinct[2]]
        return out.logits[:, -1][distinct[2]]

    def step(self, inputs: dict[str, Tensor]) -> Tensor:
        with self.precision():
            return self.step_model(**inputs, use_cache=True, logits_to_keep=1, **{CACHE_ARG: self.cache}).logits[:, -1]

    def select(self, keep: Tensor) -> None:
        self.cache.batch_select_indices(keep)


def drops_cache(model) -> bool:
    """Whether ``model``'s layers ignore a KV cache in this call: Hugging Face's gradient checkpointing does so
    in training mode (a cache written in the forward would be written again by the backward's recompute)."""
    return model.training and any(getattr(m, "gradient_checkpointing", False) for m in model.modules())


def one_forward(model) -> bool:
    """Whether ``model`` must run as one forward per call, without prompt sharing's two (prefill, then the
    continuations): when it drops caches (``drops_cache``), and when it is sharded with FSDP, whose forwards are
    collectives that must pair up on every rank whatever its rows (a rank's rows may all differ in prompt)."""
    return drops_cache(model) or isinstance(model, FSDPModule)


def packing_choice(model, prompt_mask: Tensor, distinct: tuple[Tensor, Tensor, Tensor] | None, Tc: int,
                   reads: Tensor | None) -> tuple[PackedRows, int]:
    """``(layout, padded)``: the packed rows of ``read_after_prompt``'s inputs (left-trimmed ``prompt_mask``
    ``[B, Tp]``, ``Tc`` continuation tokens, ``reads`` or all ``1 + Tc``; ``distinct``: ``distinct_prompts`` or
    None) and the token positions its padded forward computes, ``U · Tp + B · Tc`` with prompt sharing (U < B
    distinct prompts), ``B · (Tp + Tc)`` without."""
    B, Tp = prompt_mask.shape
    reads = torch.full((B,), 1 + Tc, device=prompt_mask.device) if reads is None else reads
    packed = PackedRows.plan(prompt_mask.sum(1), reads, one_row=varlen_attention(model))
    return packed, (B if distinct is None else len(distinct[0])) * Tp + B * Tc


def read_after_prompt(model, prompt_ids: Tensor, prompt_mask: Tensor, continuation: Tensor,
                      read: Callable[[object], Tensor], *, lm_head: bool, reads: Tensor | None = None,
                      pack: PackRows = False) -> Tensor:
    """``read(model(prompt ++ continuation))`` at the last prompt position and at every continuation position,
    ``[B, 1 + Tc, ...]``, each distinct prompt computed once.

    ``read`` picks the output tensor (``logits`` of a causal LM with ``lm_head``, ``last_hidden_state`` of a
    trunk). Without repeated prompts, or when the model must run as one forward (``one_forward``), this is one
    plain forward.

    ``reads`` ``[B]`` (None: all ``1 + Tc``): the outputs of row b that are used, its first ``reads[b]``; the
    others may be 0. ``pack``: run the rows' real tokens in packed rows instead (polo.policy.packing; True), or do
    so when that computes fewer token positions than the padded forward (``"auto"``): packed ``R · W`` against
    ``U · Tp + B · Tc`` with prompt sharing (U distinct prompts), ``B · (Tp + Tc)`` without. Packing drops prompt
    sharing (each sequence carries its own prompt), so it wins where responses' padding outweighs the repeated
    prompts (docs/performance.md, "Packed rows").
    """
    if pack not in (True, False, "auto"):
        raise ValueError(f"pack={pack!r}: expected true, false or 'auto'")
    prompt_ids, prompt_mask = trim_left_padding(prompt_ids, prompt_mask.long())
    B, Tc = continuation.shape
    distinct = None if one_forward(model) else distinct_prompts(prompt_ids, prompt_mask)
    shared = distinct is not None and len(distinct[0]) < B
    if pack is not False:
        packed, padded = packing_choice(model, prompt_mask, distinct, Tc, reads)
        if pack is True or packed.positions < padded:
            return packed.read(model, prompt_ids, continuation, read)
    if not shared:
        keep = {"logits_to_keep": Tc + 1} if lm_head else {}
        out = model(**concat_inputs(prompt_ids, prompt_mask, continuation), use_cache=False, **keep)
        return read(out)[:, -(Tc + 1):]
    cache = new_cache(model)
    out = prefill(model, distinct, cache, **({"logits_to_keep": 1} if lm_head else {}))
    head = read(out)[:, -1:][distinct[2]]
    if Tc == 0:
        return head
    attention = torch.cat([prompt_mask, prompt_mask.new_ones(B, Tc)], 1)
    position = prompt_mask.sum(-1, keepdim=True) + torch.arange(Tc, device=continuation.device)
    tail = read(model(input_ids=continuation, attention_mask=attention, position_ids=position, use_cache=True,
                      **{CACHE_ARG: cache}))
    return torch.cat([head, tail], 1)
