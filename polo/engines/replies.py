"""Text a model writes for an engine besides the policy's actions: a teacher's hint (polo.engines.hints), a harness
edit the policy proposes (Self-HPO), an instruction an optimizer model proposes (INSPO)."""
from __future__ import annotations

import torch

from polo.engines.sampler import sample


@torch.no_grad()
def sample_replies(model, prompts: list[str], max_tokens: int, generator: torch.Generator | None = None,
                   greedy: bool = False) -> list[str]:
    """A causal LM's reply to each prompt, at most ``max_tokens`` tokens, sampled with ``generator`` (or greedy),
    each prompt cut from the left to fit the model's context."""
    limit = getattr(model.hf_model.config, "max_position_embeddings", None)
    if limit is not None:
        prompts = [p[-(limit - max_tokens - 2):] for p in prompts]
    ids, mask = model.encode_prompts(prompts)
    out = sample(model, ids, mask, max_new_tokens=max_tokens, generator=generator, greedy=greedy)
    return model.decode(out.response_ids, out.response_mask)
