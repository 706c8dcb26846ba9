"""Reward models: a language model's trunk with a scalar head, ``r(x, y)``, as a Hugging Face sequence classifier.

A reward model is ``*ForSequenceClassification`` with ``num_labels = 1``: the trunk reads the text of prompt and
response, a linear head (no bias) maps each position's last hidden state to one number, and the reward is the
number at the last token that is not padding (Hugging Face's own pooling: the rightmost token whose id is not the
pad id). A saved reward model is a ``save_pretrained`` folder (weights, config and tokenizer with its pad token)
plus ``polo_reward_model.json``; anyone loads it without polo::

    model = AutoModelForSequenceClassification.from_pretrained(DIR)
    tokenizer = AutoTokenizer.from_pretrained(DIR)
    reward = model(**tokenizer(prompt + response, return_tensors="pt")).logits[0, 0]

The text of a pair is ``prompt + response`` (format ``text``) or, for a model with a chat template and
``chat_template`` on, the template applied to a user turn (the prompt) and an assistant turn (the response)
(format ``chat``); the format is recorded in ``polo_reward_model.json``. A reward model is built from a causal LM
(its trunk's weights are copied, the head starts at zero so every reward starts at 0, InstructGPT's starting
point: "Training language models to follow instructions with human feedback" (arXiv:2203.02155)), from the
built-in tiny architecture, or loaded from a folder ``polo rm`` wrote (also the judge role's classifier back end).
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import torch
from torch import Tensor, nn
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification, PreTrainedModel

from polo.core.registry import ConfigError
from polo.policy.inputs import pad_sequences
from polo.policy.policy import load_tokenizer, loading, resolve_device
from polo.policy.tiny import TinyModelConfig, build_tiny_model
from polo.policy.tokenizer import build_char_tokenizer

RM_INFO = "polo_reward_model.json"
"""The file of a reward-model folder that records the text format (and, from ``polo rm``, how it was trained)."""
FORMATS = ("text", "chat")


def pair_outcomes(chosen: Tensor, rejected: Tensor, ties: float = 0.0) -> Tensor:
    """Per pair ``c = 1[s_chosen > s_rejected]``, ``ties`` where the two scores are equal (0: strict, a tie is
    wrong; 0.5: half right). A NaN score never compares true: its pair counts 0."""
    return (chosen > rejected).float() + ties * (chosen == rejected).float()


def pair_texts(tokenizer, format: str, prompts: list[str], responses: list[str]) -> list[str]:
    """The text a reward model of ``format`` reads for each prompt and response (see the module docstring)."""
    if format == "text":
        return [p + r for p, r in zip(prompts, responses, strict=True)]
    return [tokenizer.apply_chat_template([{"role": "user", "content": p}, {"role": "assistant", "content": r}],
                                          tokenize=False) for p, r in zip(prompts, responses, strict=True)]


def _set_pad(tokenizer, config) -> None:
    """A pad token for batching (the eos token when the tokenizer has none), recorded in the model's config:
    Hugging Face's pooling finds each row's last token by it."""
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ConfigError("the tokenizer defines neither a pad nor an eos token: a reward model needs a pad token "
                              "to batch texts of different lengths")
        tokenizer.pad_token = tokenizer.eos_token
    config.pad_token_id = tokenizer.pad_token_id


def _is_reward_config(config) -> bool:
    return any(a.endswith("ForSequenceClassification") for a in config.architectures or ()) and config.num_labels == 1


class RewardModel(nn.Module):
    """A sequence classifier with one output and its tokenizer: ``rewards`` (with autograd, for training) and
    ``score`` (batched, no grad) of prompts and responses."""

    def __init__(self, model: PreTrainedModel, tokenizer, *, format: str = "text"):
        super().__init__()
        if format not in FORMATS:
            raise ConfigError(f"reward model text format {format!r}: expected one of {', '.join(FORMATS)}")
        if format == "chat" and getattr(tokenizer, "chat_template", None) is None:
            raise ConfigError("reward model format 'chat' needs a tokenizer with a chat template; this one has none")
        self.model = model
        self.tokenizer = tokenizer
        self.format = format
        _set_pad(tokenizer, model.config)

    @classmethod
    def from_causal_lm(cls, causal: PreTrainedModel, tokenizer, *, chat_template: bool = False) -> "RewardModel":
        """The sequence classifier of ``causal``'s architecture with ``causal``'s trunk weights and a zero head
        (``chat_template``: format ``chat`` when the tokenizer has a template)."""
        config = copy.deepcopy(causal.config)
        config.num_labels = 1
        with torch.random.fork_rng(devices=[]):  # the head's initial draw is overwritten by zeros below
            model = AutoModelForSequenceClassification.from_config(config, dtype=causal.dtype)
        model.base_model.load_state_dict(causal.base_model.state_dict())
        prefix = model.base_model_prefix + "."
        with torch.no_grad():
            for name, param in model.named_parameters():
                if not name.startswith(prefix):
                    param.zero_()
        use_chat = chat_template and getattr(tokenizer, "chat_template", None) is not None
        return cls(model, tokenizer, format="chat" if use_chat else "text")

    @classmethod
    def builtin(cls, cfg: TinyModelConfig | None = None, fit: tuple[list[str], list[str]] = ([], [])) -> "RewardModel":
        """The built-in tiny architecture with the char tokenizer, freshly initialised (seed with
        ``torch.manual_seed``); its context is raised to hold the longest text of the prompts and responses
        ``fit``."""
        cfg, tokenizer = cfg or TinyModelConfig(), build_char_tokenizer()
        texts = pair_texts(tokenizer, "text", *fit)
        longest = max(map(len, tokenizer(texts)["input_ids"])) if texts else 0
        cfg = cfg.model_copy(update={"max_position_embeddings": max(cfg.max_position_embeddings, longest)})
        return cls.from_causal_lm(build_tiny_model(cfg, tokenizer), tokenizer)

    @classmethod
    def load(cls, path: str | Path, *, device: str = "cpu") -> "RewardModel":
        """A reward model folder (``polo rm``'s, or any local ``*ForSequenceClassification`` with one label)."""
        path = Path(path)
        tokenizer = load_tokenizer(path)
        with loading(path):
            config = AutoConfig.from_pretrained(path, local_files_only=True)
            if not _is_reward_config(config):
                raise ConfigError(f"{str(path)!r} is not a reward model folder: expected a *ForSequenceClassification "
                                  f"with num_labels=1, got architectures={config.architectures} with "
                                  f"num_labels={config.num_labels} (polo rm turns a causal LM into one)")
            model = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32, local_files_only=True)
        info = json.loads((path / RM_INFO).read_text()) if (path / RM_INFO).is_file() else {}
        return cls(model, tokenizer, format=info.get("format", "text")).to(resolve_device(device))

    @classmethod
    def init_from(cls, path: str | Path, *, chat_template: bool = False) -> "RewardModel":
        """The starting point of reward-model training: a reward model folder as it is, or a causal LM folder
        (``from_causal_lm``)."""
        path = Path(path)
        tokenizer = load_tokenizer(path)  # first: the missing-folder / missing-config.json errors
        with loading(path):
            config = AutoConfig.from_pretrained(path, local_files_only=True)
        if _is_reward_config(config):
            return cls.load(path)
        with loading(path):
            causal = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, local_files_only=True)
        return cls.from_causal_lm(causal, tokenizer, chat_template=chat_template)

    def save(self, path: str | Path, info: dict | None = None) -> None:
        """``save_pretrained`` of model and tokenizer, and ``polo_reward_model.json`` (the format and ``info``)."""
        path = Path(path)
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        (path / RM_INFO).write_text(json.dumps({"format": self.format, **(info or {})}, indent=2) + "\n")

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def max_length(self) -> int | None:
        """Longest text in tokens the model's positions cover (None: the config sets no limit)."""
        return getattr(self.model.config, "max_position_embeddings", None)

    def texts(self, prompts: list[str], responses: list[str]) -> list[str]:
        """The text the model reads for each pair (``pair_texts``)."""
        return pair_texts(self.tokenizer, self.format, prompts, responses)

    def token_ids(self, prompts: list[str], responses: list[str]) -> list[list[int]]:
        """Token ids of each pair's text (with the tokenizer's special tokens, as ``tokenizer(text)`` gives them);
        a ValueError naming the longest when one exceeds ``max_length``."""
        seqs = self.tokenizer(self.texts(prompts, responses))["input_ids"] if prompts else []
        longest = max((len(s) for s in seqs), default=0)
        if self.max_length is not None and longest > self.max_length:
            raise ValueError(f"a prompt and response of {longest} tokens exceed the reward model's "
                             f"max_position_embeddings={self.max_length}")
        return seqs

    def rewards(self, prompts: list[str], responses: list[str]) -> Tensor:
        """``r(x, y)`` ``[B]`` float32 on the model's device, with autograd (for training)."""
        ids, mask = pad_sequences(self.token_ids(prompts, responses), self.tokenizer.pad_token_id, left=False,
                                  device=self.device)
        return self.model(input_ids=ids, attention_mask=mask).logits[:, 0].float()

    def score(self, prompts: list[str], responses: list[str], batch_size: int = 64) -> Tensor:
        """``r(x, y)`` ``[B]`` float32 on the host, in eval mode and without grad, ``batch_size`` texts per forward."""
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                parts = [self.rewards(prompts[i: i + batch_size], responses[i: i + batch_size]).cpu()
                         for i in range(0, len(prompts), batch_size)]
        finally:
            self.model.train(was_training)
        return torch.cat(parts) if parts else torch.zeros(0)
