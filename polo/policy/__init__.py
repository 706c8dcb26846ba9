"""Policies: the built-in tiny model, any local Hugging Face checkpoint, LoRA, the critic, the reference."""
from polo.policy.lora import LoraConfig, apply_lora
from polo.policy.policy import Policy, ValueModel
from polo.policy.reference import frozen_copy
from polo.policy.tiny import TinyModelConfig, build_tiny_model
from polo.policy.tokenizer import build_char_tokenizer

__all__ = [
    "LoraConfig", "Policy", "TinyModelConfig", "ValueModel", "apply_lora", "build_char_tokenizer",
    "build_tiny_model", "frozen_copy",
]
