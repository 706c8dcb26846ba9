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
    tool_mask: Tensor | None = None  # [B, T] 1 on tool tokens inside the response (mask 0, logp 0); None: none

    @property
    def text_mask(self) -> Tensor:
        """``[B, T]`` the tokens of the completion's text: the generated ones and the tool's."""
        return self.response_mask if self.tool_mask is None else self.response_mask | self.tool_mask
