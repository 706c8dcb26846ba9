"""Model inputs for left-padded prompts followed by right-padded responses."""
from __future__ import annotations

import torch
from torch import Tensor


def pad_sequences(seqs: list[list[int]], pad_id: int, *, left: bool, device=None) -> tuple[Tensor, Tensor]:
    """Pad token lists into ``(ids [B, T], mask [B, T])``, on the left (prompts) or the right (completions)."""
    width = max((len(s) for s in seqs), default=0)
    padded = [[pad_id] * (width - len(s)) + s if left else s + [pad_id] * (width - len(s)) for s in seqs]
    ids = torch.tensor(padded, dtype=torch.long).reshape(len(seqs), width)
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    column = torch.arange(width)
    mask = (column >= width - lengths[:, None]) if left else (column < lengths[:, None])
    return ids.to(device), mask.long().to(device)


def positions(attention_mask: Tensor) -> Tensor:
    """Position ids that count only attended tokens, so a left-padded row starts at position 0."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def concat_inputs(prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor) -> dict[str, Tensor]:
    """``input_ids``/``attention_mask``/``position_ids`` of ``prompt ++ response``.

    Every response position is attended: right padding only follows the tokens that matter (causal
    attention never looks ahead), and positions with ``response_mask == 0`` inside a response (tool or
    environment tokens in a multi-turn trajectory) are real context.
    """
    mask = torch.cat([prompt_mask.long(), torch.ones_like(response_ids)], dim=1)
    ids = torch.cat([prompt_ids, response_ids], dim=1)
    return {"input_ids": ids, "attention_mask": mask, "position_ids": positions(mask)}


def trim_left_padding(prompt_ids: Tensor, prompt_mask: Tensor) -> tuple[Tensor, Tensor]:
    """Drop leading columns that are padding in every row."""
    first = int(prompt_mask.any(0).long().argmax()) if prompt_mask.numel() else 0
    return prompt_ids[:, first:], prompt_mask[:, first:]
