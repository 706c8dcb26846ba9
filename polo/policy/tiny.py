"""The built-in causal LMs: a standard Llama/Qwen2 Hugging Face model built from a config, locally.

Two presets size it: ``tiny`` (the default: hidden 128, 2 layers, 4 heads of 32, 0.5M parameters, 64
positions; a CPU trains it in minutes) and ``base`` (hidden 256, 6 layers, 4 heads of 64, 6.3M parameters,
512 positions: room for the reasoning traces of the task ladder, and a head size vLLM's attention serves).
A key given next to ``preset`` overrides the preset's value (``{preset: base, num_layers: 8}``).
"""
from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field, model_validator
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel, Qwen2Config, Qwen2ForCausalLM

from polo.core.registry import Settings

ARCHITECTURES = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}
PRESETS = {
    "tiny": {"hidden_size": 128, "num_layers": 2, "num_heads": 4, "intermediate_size": 512, "max_position_embeddings": 64},
    "base": {"hidden_size": 256, "num_layers": 6, "num_heads": 4, "intermediate_size": 1024,
             "max_position_embeddings": 512},
}


class TinyModelConfig(Settings):
    """Size of the built-in model: a preset, and any of its sizes overridden by name."""

    preset: Literal["tiny", "base"] = "tiny"
    """Named size (module docstring); the size keys below default to the preset's values."""
    arch: Literal["llama", "qwen2"] = "llama"
    """Hugging Face architecture of the built-in model."""
    hidden_size: int = Field(128, gt=0)
    """Width of the residual stream."""
    num_layers: int = Field(2, gt=0)
    """Transformer blocks."""
    num_heads: int = Field(4, gt=0)
    """Attention heads (each of an even size dividing ``hidden_size``)."""
    intermediate_size: int = Field(512, gt=0)
    """Width of the MLP."""
    max_position_embeddings: int = Field(64, gt=0)
    """Context length in tokens (characters): prompt plus completion."""

    @model_validator(mode="before")
    @classmethod
    def _preset_sizes(cls, data):
        if isinstance(data, dict) and data.get("preset", "tiny") in PRESETS:
            return {**PRESETS[data.get("preset", "tiny")], **data}
        return data  # an unknown preset: the field's validation names it

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> "TinyModelConfig":
        if self.hidden_size % self.num_heads or (self.hidden_size // self.num_heads) % 2:
            raise ValueError(f"hidden_size={self.hidden_size} must split into num_heads={self.num_heads} heads of an "
                             f"even size (rotary embeddings)")
        return self


def build_tiny_model(cfg: TinyModelConfig, tokenizer) -> PreTrainedModel:
    """A freshly initialised float32 causal LM with tied embeddings, sized for ``tokenizer``'s vocabulary."""
    config_cls, model_cls = ARCHITECTURES[cfg.arch]
    config = config_cls(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        intermediate_size=cfg.intermediate_size,
        max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = model_cls(config).to(torch.float32)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model
