"""The masked diffusion LM policy (``model.kind: diffusion``): a bidirectional Hugging Face masked LM that decodes
itself by iterative unmasking and scores a response by its sequence ELBO.

The model is a standard ``BertForMaskedLM`` built from a config (any local checkpoint ``AutoModelForMaskedLM``
loads serves as well), with polo's character tokenizer plus a ``<mask>`` token (appended: the causal tokenizer's ids
are unchanged). A response lives on a fixed canvas of ``max_new_tokens`` positions: it ends at its first eos, and
every position after it holds eos (the policy's pad token is eos), so sampling, scoring and the warm start all see
the same canvas.

* ``forward_logp`` returns per-position ELBO contributions (polo.core.elbo): ``logp[b, i] = Σ_{n,k}
  w_n/(t_n·K)·log π(y_i | y_{t_n}^{(k)}, q)·1[i masked in draw (n, k)]``; the row sum is the estimate Ê(y) of
  GDPO ("Improving Reasoning for Diffusion Language Models via Group Diffusion Policy Optimization",
  arXiv:2510.08554). The masks derive from the row's content, so the behaviour, reference and current policy share
  them.
* ``own_sampler`` decodes: every canvas position starts as ``<mask>``; each of S steps predicts all masked
  positions, draws a token for each (temperature; argmax when greedy) and commits a scheduled share of them, the
  most confident (``low_confidence`` remasking, "Large Language Diffusion Models", arXiv:2502.09992) or a random
  share (``random``).
* ``demonstration_loss`` is the masked-diffusion training loss of LLaDA / MDLM: ``t ~ U(0, 1]`` per row, each
  canvas position masked with probability t (at least one), ``loss = −Σ_masked log π(y_i | y_t, q) / (t·L)``
  averaged over rows, the prompt never masked; t is floored at 1/L (one expected masked token), which bounds the
  weight of the forced single mask.
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal

import torch
from torch import Tensor
from transformers import AutoModelForMaskedLM, BertConfig, BertForMaskedLM, PreTrainedModel

from polo.core.elbo import ElboSettings, elbo_layout
from polo.core.losses.entropy import entropy_from_logits
from polo.core.registry import ConfigError
from polo.policy.inputs import positions, trim_left_padding
from polo.policy.lora import LoraConfig
from polo.policy.policy import ADAPTER_DIR, Policy, token_logp
from polo.policy.sampling import SampleOutput
from polo.policy.tiny import TinyModelConfig
from polo.policy.tokenizer import build_char_tokenizer

MASK_TOKEN = "<mask>"
REMASKING = ("low_confidence", "random")


def build_mask_tokenizer():
    """The character tokenizer with ``<mask>`` appended (id 100; the other ids are the causal model's)."""
    tokenizer = build_char_tokenizer()
    tokenizer.add_special_tokens({"mask_token": MASK_TOKEN})
    return tokenizer


def build_tiny_mlm(cfg: TinyModelConfig, tokenizer) -> PreTrainedModel:
    """A fresh float32 ``BertForMaskedLM`` sized by ``cfg`` (``arch`` is ignored), tied embeddings, no dropout (the
    behaviour and training forwards of a row must agree)."""
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_layers,
                        num_attention_heads=cfg.num_heads, intermediate_size=cfg.intermediate_size,
                        max_position_embeddings=cfg.max_position_embeddings, type_vocab_size=1,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, tie_word_embeddings=True,
                        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    return BertForMaskedLM(config).to(torch.float32)


class DiffusionPolicy(Policy):
    """A masked diffusion LM with polo's policy interface (module docstring). ``elbo``: how ``forward_logp``
    estimates the ELBO (quadrature, masks per node, mask salt); the ``diffusion`` engine sets it from its settings."""

    causal_trunk = False
    auto_model = AutoModelForMaskedLM

    def __init__(self, model: PreTrainedModel, tokenizer, *, chat_template: bool = False,
                 compute_dtype: torch.dtype | None = None, elbo: ElboSettings | None = None):
        if getattr(tokenizer, "mask_token_id", None) is None:
            raise ConfigError(f"a diffusion policy needs a tokenizer with a mask token ({MASK_TOKEN}); this one has "
                              f"none")
        if "generation_config" not in model.__dict__ and not hasattr(type(model), "generation_config"):
            model.generation_config = None  # a masked LM has none; Policy reads its eos ids from it
        super().__init__(model, tokenizer, chat_template=chat_template, compute_dtype=compute_dtype)
        self.mask_token_id = tokenizer.mask_token_id
        self.pad_token_id = self.eos_token_id  # the canvas after a response's end holds eos
        self.elbo = elbo or ElboSettings()

    @classmethod
    def build_tiny(cls, model_settings) -> "DiffusionPolicy":
        """A fresh built-in masked LM sized by ``model_settings.tiny`` (seed with ``torch.manual_seed``)."""
        tokenizer = build_mask_tokenizer()
        return cls(build_tiny_mlm(model_settings.tiny, tokenizer), tokenizer)

    @classmethod
    def load(cls, path: str | Path, *, dtype=torch.float32, device="cpu", lora: LoraConfig | None = None,
             chat_template: bool = False, compute_dtype: torch.dtype | None = None) -> "DiffusionPolicy":
        """A local masked-LM checkpoint folder (``AutoModelForMaskedLM``; its tokenizer must have a mask token)."""
        if lora is not None or (Path(path) / ADAPTER_DIR).is_dir():
            raise ConfigError("model.kind=diffusion does not support LoRA adapters: set model.lora.r=0")
        return super().load(path, dtype=dtype, device=device, chat_template=chat_template, compute_dtype=compute_dtype)

    def _logits(self, prompt_ids: Tensor, prompt_mask: Tensor, canvas: Tensor) -> Tensor:
        """float32 logits ``[B, T, V]`` at the canvas positions of ``prompt ++ canvas`` (all canvas positions attended,
        bidirectionally)."""
        mask = torch.cat([prompt_mask.long(), torch.ones_like(canvas)], dim=1)
        with self.autocast():
            out = self.model(input_ids=torch.cat([prompt_ids, canvas], dim=1), attention_mask=mask,
                             position_ids=positions(mask))
        return out.logits[:, prompt_ids.shape[1]:].float()

    def forward_logp(self, prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor, response_mask: Tensor,
                     *, temperature: float = 1.0, return_entropy: bool | Literal["metric"] = False,
                     return_full: bool = False, hidden_layer: int | None = None) -> dict[str, Tensor]:
        """``logp`` ``[B, T]``: the per-position ELBO contributions (module docstring; 0 off the response); one
        forward of the R = nodes × K masked copies of every row. ``entropy`` ``[B, T]``: the mean entropy of the
        model's distribution at a position over the draws that mask it (0 where none does). Full distributions and
        hidden states are not defined for an ELBO and are refused."""
        if return_full or hidden_layer is not None:
            raise ConfigError("a diffusion policy scores responses by their ELBO: components that read the full "
                              "token distribution or hidden states (return_full, hidden_layer) do not apply to it")
        home = response_ids.device
        prompt_ids, prompt_mask = trim_left_padding(prompt_ids.to(self.device), prompt_mask.to(self.device))
        valid = response_mask.to(self.device).bool()
        clean = response_ids.to(self.device).masked_fill(~valid, self.eos_token_id)
        layout = elbo_layout(self.elbo, prompt_ids, prompt_mask, clean, valid)
        (B, T), R = clean.shape, layout.coef.shape[1]
        noisy = torch.where(layout.masked, self.mask_token_id, clean[:, None, :]).flatten(0, 1)
        logits = self._logits(prompt_ids.repeat_interleave(R, 0), prompt_mask.repeat_interleave(R, 0), noisy)
        logits = logits.view(B, R, T, -1) / temperature
        result = {"logp": layout.contributions(token_logp(logits, clean[:, None, :].expand(B, R, T)))}
        if return_entropy:
            source = logits.detach() if return_entropy == "metric" else logits
            covered = layout.masked.float()
            result["entropy"] = (entropy_from_logits(source) * covered).sum(1) / covered.sum(1).clamp_min(1)
        return {name: value.to(home) for name, value in result.items()}

    forward = forward_logp

    def demonstration_loss(self, prompt_ids: Tensor, prompt_mask: Tensor, ids: Tensor, mask: Tensor,
                           inputs: dict[str, Tensor]) -> Tensor:
        """The masked-diffusion loss on demonstrations ``ids`` (module docstring); the whole canvas, trailing eos
        included, is denoised. Draws from torch's global generator."""
        B, T = ids.shape
        clean = ids.to(self.device).masked_fill(~mask.to(self.device).bool(), self.eos_token_id)
        t = (1.0 - torch.rand(B, 1)).clamp_min(1.0 / T).to(self.device)
        u = torch.rand(B, T).to(self.device)
        masked = (u < t).scatter(1, u.argmin(1, keepdim=True), True)
        prompt_ids, prompt_mask = trim_left_padding(prompt_ids.to(self.device), prompt_mask.to(self.device))
        logits = self._logits(prompt_ids, prompt_mask, clean.masked_fill(masked, self.mask_token_id))
        logp = token_logp(logits, clean) * masked
        return -(logp.sum(1) / (t.squeeze(1) * T)).mean()

    @torch.no_grad()
    def own_sampler(self, prompt_ids: Tensor, prompt_mask: Tensor, *, max_new_tokens: int, temperature: float = 1.0,
                    top_p: float = 1.0, top_k: int = 0, greedy: bool = False, generator: torch.Generator | None = None,
                    return_entropy: bool = False, return_hidden: bool = False, inputs: dict | None = None,
                    steps: int | None = None, remasking: str = "low_confidence") -> SampleOutput:
        """Decode a ``max_new_tokens`` canvas in ``steps`` denoising steps (default one position per step); at step s
        ``⌊N/S⌋`` positions (one more in the first ``N mod S`` steps) are committed. The response ends at its first
        eos (kept, ``response_mask`` 1 up to it, eos after it; ``truncated`` without one); ``logp`` are its ELBO
        contributions under the sampling temperature, ``entropy`` those of ``forward_logp``. Deterministic given
        ``generator`` (every draw is taken on the host from it)."""
        if return_hidden or inputs or top_p < 1.0 or top_k:
            raise ConfigError("the diffusion sampler draws from the full distribution of token ids only: top_p, top_k, "
                              "per-prompt inputs and prompt hidden states are not supported")
        if remasking not in REMASKING:
            raise ConfigError(f"remasking={remasking!r}: expected one of {', '.join(REMASKING)}")
        N = max_new_tokens
        S = min(steps or N, N)
        if S < 1:
            raise ConfigError(f"steps={steps}: expected a positive number of denoising steps")
        greedy, temperature = greedy or temperature == 0, temperature or 1.0
        home = prompt_ids.device
        prompt_ids, prompt_mask = trim_left_padding(prompt_ids.to(self.device), prompt_mask.to(self.device).long())
        B = prompt_ids.shape[0]
        canvas = torch.full((B, N), self.mask_token_id, dtype=torch.long, device=self.device)
        for s in range(S):
            hidden = canvas == self.mask_token_id
            z = self._logits(prompt_ids, prompt_mask, canvas) / temperature
            z[..., self.mask_token_id] = float("-inf")
            z = z.log_softmax(-1)
            if greedy:
                token = z.argmax(-1)
            else:
                cdf = z.exp().cumsum(-1)
                u = torch.rand(B, N, 1, generator=generator).to(self.device) * cdf[..., -1:]
                token = (cdf <= u).sum(-1).clamp(max=z.shape[-1] - 1)
            if remasking == "low_confidence":
                confidence = z.gather(-1, token[..., None]).squeeze(-1)
            else:
                confidence = torch.rand(B, N, generator=generator).to(self.device)
            n = N // S + (s < N % S)
            pick = confidence.masked_fill(~hidden, float("-inf")).topk(n, dim=-1).indices
            commit = torch.zeros_like(hidden).scatter(1, pick, True) & hidden
            canvas = torch.where(commit, token, canvas)
        stop = torch.isin(canvas, torch.tensor(self.stop_token_ids, device=self.device))
        ended = stop.any(1)
        length = torch.where(ended, stop.long().argmax(1) + 1, N)
        mask = torch.arange(N, device=self.device) < length[:, None]
        response = canvas.masked_fill(~mask, self.eos_token_id)
        scored = self.forward_logp(prompt_ids, prompt_mask, response, mask, temperature=temperature,
                                   return_entropy="metric" if return_entropy else False)
        parts = (response, mask.long(), scored["logp"], ~ended, scored.get("entropy"))
        return SampleOutput(*(None if x is None else x.to(home) for x in parts))
