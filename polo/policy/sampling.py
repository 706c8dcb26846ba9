"""What a sampler returns: the generated tokens, their log-probs and masks (polo's KV-cache sampler, vLLM, or a
policy's own decoding)."""
from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass
class SampleOutput:
    response_ids: Tensor  # [B, T] right-padded with pad; includes the stop token when one was generated
    response_mask: Tensor  # [B, T] 1 on generated tokens (stop token included)
    logp: Tensor  # [B, T] log-prob of each token under softmax(logits / temperature), before top-p/top-k
    truncated: Tensor  # [B] bool: reached max_new_tokens without a stop token
    entropy: Tensor | None = None  # [B, T] entropy of each token's sampling distribution (return_entropy)
    hidden: Tensor | None = None  # [B, d] last layer's state at each prompt's last token (return_hidden)
