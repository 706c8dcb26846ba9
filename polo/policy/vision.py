"""The vision-language policy (``model.kind: vision``): a small image encoder feeding the causal LM.

The built-in model is a standard Hugging Face LLaVA (``LlavaForConditionalGeneration``; "Visual Instruction
Tuning", arXiv:2304.08485): a CLIP vision transformer ("Learning Transferable Visual Models From Natural
Language Supervision", arXiv:2103.00020) cuts the image into ``patch_size`` squares, a two-layer projector maps
each patch's last-layer state into the LM's embedding space, and those vectors replace the prompt's image
tokens: the text LM then reads ``[bos, v_1 … v_N, question, answer]`` with ``N = (image_size / patch_size)²``.
The LM is the built-in tiny Llama over the character tokenizer plus one added token, ``<image>`` (appended, so
the character ids are unchanged). ``load`` reads any local LLaVA-family checkpoint the same way.

Prompts carry their picture in the Example column ``image`` and the placeholder ``<image>`` in their text (the
contract of polo.tasks.images: ``encode_image``'s uint8 RGB, H×W×3, row-major bytes); ``encode_prompts``
expands the placeholder into the N image tokens.
``prompt_inputs`` turns the columns into ``pixel_values`` ``[B, 3, H, W]`` (scaled to [−1, 1]); the engines
carry them in the batch's extras and every forward gets them back. The image token is never generated (its
logit is −inf in sampling and in training forwards), so a response never asks for an image it has not got.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch
from torch import Tensor
from transformers import AutoModelForImageTextToText, CLIPVisionConfig, LlavaConfig, LlavaForConditionalGeneration

from polo.policy.inputs import concat_inputs
from polo.policy.policy import Policy
from polo.policy.prefix import CachedDecoder, distinct_prompts
from polo.policy.tiny import build_tiny_model
from polo.policy.tokenizer import build_char_tokenizer
from polo.tasks.images import IMAGE_COLUMN, IMAGE_TOKEN

if TYPE_CHECKING:
    from polo.tasks.base import Example


def decode_images(images: Sequence[bytes], size: int) -> Tensor:
    """``pixel_values`` ``[B, 3, size, size]`` float32 in [−1, 1] (``x / 127.5 − 1``) of ``encode_image``
    columns."""
    wrong = [i for i, image in enumerate(images) if len(image) != 3 * size * size]
    if wrong:
        raise ValueError(f"image {wrong[0]} has {len(images[wrong[0]])} bytes; the model's image_size={size} needs "
                         f"3·{size}² = {3 * size * size} (an RGB uint8 [H, W, 3] picture of that side)")
    flat = np.frombuffer(b"".join(images), dtype=np.uint8).reshape(len(images), size, size, 3)
    return torch.from_numpy(flat.copy()).permute(0, 3, 1, 2).float() / 127.5 - 1.0


def image_tokens(config) -> int:
    """Image tokens one picture becomes in a LLaVA-family model: one per patch (+ the class token with the
    ``full`` feature strategy)."""
    vision = config.vision_config
    return (vision.image_size // vision.patch_size) ** 2 + (config.vision_feature_select_strategy == "full")


def build_tiny_vlm(model_settings) -> LlavaForConditionalGeneration:
    """A freshly initialised float32 LLaVA: a CLIP tower sized by ``model_settings.vision``, the built-in
    Llama sized by ``model_settings.tiny``, over the character tokenizer with ``<image>`` (``vision_tokenizer``)."""
    tokenizer = vision_tokenizer()
    with torch.device("meta"):  # only the text config is wanted: no weights, no random draws
        text = build_tiny_model(model_settings.tiny, tokenizer).config
    v = model_settings.vision
    vision = CLIPVisionConfig(image_size=v.image_size, patch_size=v.patch_size, hidden_size=v.hidden_size,
                              num_hidden_layers=v.num_layers, num_attention_heads=v.num_heads,
                              intermediate_size=v.intermediate_size, num_channels=3)
    config = LlavaConfig(vision_config=vision, text_config=text, image_token_id=tokenizer.convert_tokens_to_ids(
        IMAGE_TOKEN), vision_feature_layer=-1, vision_feature_select_strategy="default",
        image_seq_length=v.image_tokens, tie_word_embeddings=True)
    model = LlavaForConditionalGeneration(config).to(torch.float32)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def vision_tokenizer():
    """The character tokenizer with the special token ``<image>`` appended."""
    tokenizer = build_char_tokenizer()
    tokenizer.add_tokens([IMAGE_TOKEN], special_tokens=True)
    return tokenizer


class ImageDecoder(CachedDecoder):
    """KV-cached decoding whose prefill feeds each prompt's picture: rows with the same prompt *and* picture
    (a group's G samples) share one prefill; the image token's logit is −inf."""

    def __init__(self, policy: "VisionPolicy"):
        super().__init__(policy.model, policy.hf_model, policy.autocast)
        self.image_token_id = policy.image_token_id

    def prefill(self, distinct: tuple[Tensor, Tensor, Tensor], pixel_values: Tensor | None = None,
                **inputs: Tensor) -> Tensor:
        """``distinct``: prompts ``[U, Tp]`` and the batch's row → prompt ``inverse``; ``pixel_values``
        ``[U, 3, H, W]`` their pictures. Prompts are regrouped by (ids, mask, exact pixel bits)."""
        if pixel_values is None:
            raise ValueError("the vision policy samples with images: pass inputs=policy.prompt_inputs(prompts)")
        ids, mask, inverse = distinct
        Tp, shape = ids.shape[1], pixel_values.shape
        bits = pixel_values.float().contiguous().view(torch.int32).flatten(1).long()
        rows, row_mask, regroup = distinct_prompts(torch.cat([ids, bits], 1),
                                                   torch.cat([mask, torch.ones_like(bits)], 1))
        pixels = rows[:, Tp:].to(torch.int32).view(torch.float32).reshape(len(rows), *shape[1:])
        logits = super().prefill((rows[:, :Tp], row_mask[:, :Tp], regroup[inverse]), pixel_values=pixels, **inputs)
        return self._ban(logits)

    def step(self, inputs: dict[str, Tensor]) -> Tensor:
        return self._ban(super().step(inputs))

    def _ban(self, logits: Tensor) -> Tensor:
        logits[:, self.image_token_id] = float("-inf")
        return logits


class VisionPolicy(Policy):
    """A LLaVA-family vision-language model with its tokenizer (module docstring); ``pixel_values`` is the one
    per-prompt input besides the token ids. The PPO critic (``ValueModel``) is not built for it."""

    causal_trunk = False
    auto_model = AutoModelForImageTextToText

    input_names: ClassVar[tuple[str, ...]] = ("pixel_values",)

    def __init__(self, model, tokenizer, **kwargs):
        super().__init__(model, tokenizer, **kwargs)
        config = self.hf_model.config
        if not hasattr(config, "vision_config"):
            raise ValueError(f"model.kind=vision needs a vision-language (LLaVA-family) model, got "
                             f"{type(self.hf_model).__name__}")
        self.image_token_id = config.image_token_id
        self.image_tokens = image_tokens(config)
        self.image_size = config.vision_config.image_size
        self.image_text = tokenizer.convert_ids_to_tokens(self.image_token_id)

    @classmethod
    def build_tiny(cls, model_settings) -> "VisionPolicy":
        """The untrained built-in model (``build_tiny_vlm``); seed with ``torch.manual_seed``."""
        return cls(build_tiny_vlm(model_settings), vision_tokenizer())

    def _expand(self, prompt: str | Example) -> str | Example:
        """The prompt with its ``<image>`` placeholder written as the model's ``image_tokens`` image tokens."""
        def expand(text: str) -> str:
            return text.replace(IMAGE_TOKEN, self.image_text * self.image_tokens)
        if isinstance(prompt, str):
            return expand(prompt)
        messages = prompt.messages and tuple({**m, "content": expand(m["content"])} for m in prompt.messages)
        return replace(prompt, prompt=expand(prompt.prompt), messages=messages)

    def encode_prompts(self, prompts: Sequence[str | Example]) -> tuple[Tensor, Tensor]:
        """``Policy.encode_prompts`` with each prompt's ``<image>`` expanded; a ValueError unless every prompt
        holds exactly one picture's image tokens."""
        ids, mask = super().encode_prompts([self._expand(p) for p in prompts])
        count = ((ids == self.image_token_id) & mask.bool()).sum(1)
        bad = (count != self.image_tokens).nonzero()
        if len(bad):
            i = int(bad[0])
            raise ValueError(f"prompt {i} holds {int(count[i])} image tokens, expected {self.image_tokens} (one "
                             f"{IMAGE_TOKEN!r} placeholder): {getattr(prompts[i], 'prompt', prompts[i])[:60]!r}")
        return ids, mask

    def prompt_inputs(self, prompts: Sequence[str | Example]) -> dict[str, Tensor]:
        """``pixel_values`` ``[B, 3, H, W]`` of each Example's ``image`` column (``decode_images``)."""
        images = [getattr(p, "columns", {}).get(IMAGE_COLUMN) for p in prompts]
        missing = [i for i, image in enumerate(images) if image is None]
        if missing:
            raise ValueError(f"prompt {missing[0]} has no {IMAGE_COLUMN!r} column: the vision policy needs each "
                             f"prompt's picture (an Example whose columns hold encode_image bytes)")
        return {"pixel_values": decode_images(images, self.image_size)}

    def decoder(self) -> ImageDecoder:
        return ImageDecoder(self)

    def restrict(self, logits: Tensor, prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor) -> Tensor:
        """The image token's logit −inf: it is never part of a response."""
        return logits.index_fill(-1, torch.tensor([self.image_token_id], device=logits.device), float("-inf"))

    def response_logits(self, prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor,
                        hidden_layer: int | None, inputs: dict[str, Tensor],
                        reads: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """One plain forward over ``prompt ++ response`` with the pictures (no shared prefixes: prompts that
        read alike may show different pictures; no packed rows: the pictures' tokens sit in the prompts): the
        logits predicting each response token and, with ``hidden_layer``, that layer's hidden states; ``reads`` is
        not used."""
        if "pixel_values" not in inputs:
            raise ValueError("the vision policy's forward needs pixel_values (policy.model_inputs(batch))")
        T = response_ids.shape[1]
        out = self.model(**concat_inputs(prompt_ids, prompt_mask, response_ids), use_cache=False,
                         pixel_values=inputs["pixel_values"], logits_to_keep=T + 1,
                         output_hidden_states=hidden_layer is not None)
        return out.logits[:, :-1].float(), None if hidden_layer is None else out.hidden_states[hidden_layer]
