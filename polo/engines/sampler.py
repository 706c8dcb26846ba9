"""polo's batched sampler: one prefill of each distinct left-padded prompt (shared by its G samples), then
token-by-token decoding with a KV cache reserved for the whole decode and written in place (polo.policy.kv_cache).

Rows that emit a stop token are dropped from the model's batch and KV cache in groups (moved to the front of the
cache's buffers, which stay), so the work per step shrinks with the number of unfinished rows; the loop
ends when every row has finished. ``rollout.compile_decode`` runs the one-token steps through ``torch.compile``
(``Policy.decode_step_model``).
"""
from __future__ import annotations

import torch
from torch import Tensor
from polo.policy.inputs import trim_left_padding
from polo.policy.policy import Policy
from polo.policy.sampling import SampleOutput
from polo.policy.prefix import distinct_prompts
from polo.engines.tool_use import ToolCalls
from polo.tasks.base import Tool

COMPACT_FRACTION = 8
"""Finished rows leave the batch once they are at least 1/COMPACT_FRACTION of it (selecting cache rows costs)."""


def _draw(z: Tensor, top_p: float, top_k: int, generator: torch.Generator | None) -> Tensor:
    """One token per row from ``softmax(z)`` restricted to the top-k tokens and the top-p nucleus; ``z`` are
    log-probabilities (``exp`` of them is summed, so they must not overflow)."""
    if 0 < top_k < z.shape[-1]:
        z = z.masked_fill(z < z.topk(top_k).values[:, -1:], float("-inf"))
    if top_p < 1.0:
        sorted_z, order = z.sort(-1, descending=True)
        p = sorted_z.softmax(-1)
        outside = p.cumsum(-1) - p > top_p  # keep the shortest prefix whose mass reaches top_p
        z = z.scatter(-1, order, sorted_z.masked_fill(outside, float("-inf")))
    # inverse-CDF draw: one uniform per row (several times faster than torch.multinomial on CPU), drawn on the
    # host generator's device and moved: the same draws on every device. The token is the count of CDF entries
    # ≤ u, found by binary search (the CDF of non-negative terms never decreases) rather than a pass over V.
    cdf = z.exp().cumsum(-1)
    u = torch.rand(z.shape[0], 1, generator=generator).to(z.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp(max=z.shape[-1] - 1)


@torch.no_grad()
def sample(policy: Policy, prompt_ids: Tensor, prompt_mask: Tensor, *, max_new_tokens: int,
           temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0, greedy: bool = False,
           generator: torch.Generator | None = None, return_entropy: bool = False,
           return_hidden: bool = False, inputs: dict[str, Tensor] | None = None, tool: Tool | None = None,
           **own) -> SampleOutput:
    """Sample up to ``max_new_tokens`` per prompt; deterministic given ``generator``.

    ``temperature == 0`` means greedy (log-probs then use temperature 1). The logits come from
    ``policy.decoder()``, so a policy wrapper that restricts the action space (NLPO's
    ``ActionMaskedPolicy``) restricts sampling and log-probs alike (−inf logits drop out of the softmax).
    ``return_entropy`` also records ``H = −Σ_v p_v log p_v`` of each drawn token's distribution (after the
    temperature, before top-p/top-k); ``return_hidden`` keeps the last layer's state at each prompt's last
    token from the prefill (no extra forward). The model runs on ``policy.device`` in its mixed precision
    (``Policy.autocast``); the outputs are float32, on ``prompt_ids``' device.

    ``inputs``: per-prompt model inputs besides the ids (``Policy.prompt_inputs``, e.g. images), given to the
    prefill; rows then do not share prefills. A policy with its own decoding (``Policy.own_sampler``, e.g. a
    diffusion LM) is sampled by it, with these keywords and the engine's own (``own``).

    ``tool``: run during decoding (polo.engines.tool_use): each time a row's text ends with the tool's trigger, the
    tool's reply is fed as the row's next tokens, with ``response_mask`` 0 and log-prob 0 (``tool_mask`` 1).
    """
    if policy.own_sampler is not None and tool is not None:
        raise ValueError(f"{type(policy).__name__} decodes with its own sampler, which cannot run the task's tool "
                         f"(tools run in polo's causal-LM sampler)")
    if policy.own_sampler is not None:
        return policy.own_sampler(prompt_ids, prompt_mask, max_new_tokens=max_new_tokens, temperature=temperature,
                                  top_p=top_p, top_k=top_k, greedy=greedy, generator=generator,
                                  return_entropy=return_entropy, return_hidden=return_hidden, inputs=inputs, **own)
    if own:
        raise TypeError(f"sample() got sampler settings {sorted(own)} that only a policy with its own sampler reads")
    home, device = prompt_ids.device, policy.device
    prompt_ids, prompt_mask = trim_left_padding(prompt_ids.to(device), prompt_mask.to(device).long())
    B, Tp = prompt_ids.shape
    greedy, temperature = greedy or temperature == 0, temperature or 1.0
    stop = torch.tensor(policy.stop_token_ids, device=device)

    out_ids = torch.full((B, max_new_tokens), policy.pad_token_id, dtype=torch.long, device=device)
    out_logp = torch.zeros(B, max_new_tokens, device=device)
    out_entropy = torch.zeros(B, max_new_tokens, device=device) if return_entropy else None
    length = torch.full((B,), max_new_tokens + 1, device=device)  # stays max_new_tokens + 1 without a stop token
    calls = None if tool is None else ToolCalls(tool, policy, B, max_new_tokens, device)

    rows = torch.arange(B, device=device)  # original index of each row still in the model's batch
    alive = torch.ones(B, dtype=torch.bool, device=device)  # per row of the model's batch
    attention = torch.cat([prompt_mask, prompt_mask.new_ones(B, max_new_tokens)], dim=1)
    next_position = prompt_mask.sum(-1, keepdim=True)
    padded = not bool(prompt_mask.all())  # without padding the model's own causal mask is enough
    inputs = {name: x.to(device) for name, x in (inputs or {}).items()}
    # the G samples of a prompt share its prefill (rows with their own inputs each have their own)
    distinct = (prompt_ids, prompt_mask, torch.arange(B, device=device)) if inputs else \
        distinct_prompts(prompt_ids, prompt_mask)
    decoder = policy.decoder()
    decoder.keep_hidden, decoder.new_tokens = return_hidden, max_new_tokens
    logits = decoder.prefill(distinct, **inputs)
    hidden = decoder.hidden.float() if return_hidden else None
    steps = 0
    for t in range(max_new_tokens):
        z = logits.float() if temperature == 1.0 else logits.float() / temperature
        z = z.log_softmax(-1)  # one normalization serves the draw and the token's log-prob
        token = z.argmax(-1) if greedy else _draw(z, top_p, top_k, generator)
        sampled = alive
        if calls is not None:  # rows owed a tool reply take its next token: not the policy's, no log-prob
            token, forced = calls.force(rows, token, t)
            sampled = alive if forced is None else alive & ~forced
        at = (slice(None), t) if len(rows) == B else (rows, t)  # before any compaction, rows == arange(B)
        out_ids[at] = token.masked_fill(~alive, policy.pad_token_id)
        out_logp[at] = z.gather(-1, token[:, None]).squeeze(-1).masked_fill(~sampled, 0.0)
        if out_entropy is not None:
            out_entropy[at] = -(z.exp() * z.clamp_min(torch.finfo(z.dtype).min)).sum(-1).masked_fill(~sampled, 0.0)
        steps = t + 1

        stopped = sampled & torch.isin(token, stop)
        if calls is not None:
            calls.after_step(rows, sampled & ~stopped, out_ids, steps)
        length[rows[stopped]] = t + 1
        alive &= ~stopped
        n_alive = int(alive.sum())
        if n_alive == 0 or steps == max_new_tokens:
            break
        if len(rows) - n_alive >= max(1, len(rows) // COMPACT_FRACTION):
            keep = alive.nonzero().squeeze(1)
            decoder.select(keep)
            rows, alive, token, attention, next_position = (
                x[keep] for x in (rows, alive, token, attention, next_position))
        inputs = {"input_ids": token[:, None], "position_ids": next_position,
                  "attention_mask": attention[:, : Tp + steps] if padded else None}
        logits = decoder.step(inputs)
        next_position = next_position + 1

    mask = (torch.arange(steps, device=device) < length[:, None]).long()
    tool_mask = None if calls is None else calls.mask[:, :steps] * mask
    parts = (out_ids[:, :steps], mask if tool_mask is None else mask - tool_mask, out_logp[:, :steps],
             length > max_new_tokens, None if out_entropy is None else out_entropy[:, :steps] * mask, hidden, tool_mask)
    return SampleOutput(*(None if x is None else x.to(home) for x in parts))
