"""Packed rows: a batch's sequences laid end to end in unpadded rows, each attending only to itself.

A training forward over left-padded prompts ++ right-padded responses computes every padding position. Packing
lays each row's real tokens end to end instead — its prompt's ``P_b`` tokens, then its response tokens up to the
last one whose successor is read: reading ``n_b`` outputs (the last prompt position predicts response token 0,
…, position ``P_b + n_b − 2`` predicts token ``n_b − 1``) needs ``s_b = P_b + n_b − 1`` input tokens. The
position ids restart at 0 with each sequence. A Hugging Face model given such position ids with no attention mask
and no cache treats them as packed sequences: a block-diagonal causal mask under SDPA, eager or flex attention,
flash-attention's varlen kernel on a single row. Each sequence's outputs are then those of the sequence alone
(the same sums, in another floating-point order); ``read`` gathers them back to the padded ``[B, 1 + Tc]``
layout.

Layout (``PackedRows.plan``): dense attention (SDPA, eager) computes every query × key pair of a row, so rows
are at most as wide as the longest sequence (attention per query is then no wider than padded rows'); a varlen
kernel (``attn_implementation`` ``flash_attention_*``) computes only each sequence's own pairs, so all
sequences go into one row of ``Σ s_b`` tokens (transformers' varlen path reads packing from one row only).

Packing against prompt sharing (polo.policy.prefix): a packed sequence carries its own prompt, so packing gives
sharing up. ``pack="auto"`` (``read_after_prompt``) packs where the packed rows compute fewer token positions,
``R · W``, than the padded forward, ``U · Tp + B · Tc`` with U distinct prompts. Measured (bench/packing.py, the
built-in model on one CPU thread, docs/performance.md "Packed rows"): on the task ladder's shapes (base preset,
4 prompts × 8 samples, ≤ 128 / ≤ 256 tokens) packed rows compute 0.88 / 0.80 × the positions and take 0.86 /
0.72 × the update time; on 8 × 8 answers of ≤ 8 tokens they would compute 1.7 × the positions and take 1.47 × the
time, and ``auto`` keeps prompt sharing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

import torch
from torch import Tensor

PackRows = bool | Literal["auto"]
"""``train.pack_rows``: pack always (True), never (False), or where it computes fewer positions (``"auto"``)."""

CANDIDATES = 64
"""Row counts tried above the lower bound ``⌈Σ s / W⌉`` (``assign_rows``) before one sequence per row."""


def assign_rows(sizes: Tensor, width: int) -> tuple[Tensor, int]:
    """``(row [n], R)``: each item's row among ``R`` rows whose sizes sum to at most ``width`` (every item
    ``≤ width``), with few rows.

    The items, longest first, are dealt to ``R`` rows in snake order (rows 0 … R−1, then R−1 … 0, …: each round's
    longest items go to the rows that received the shortest so far, a vectorized longest-first heuristic); every
    ``R`` from ``⌈Σ sizes / width⌉`` up (``CANDIDATES`` of them, then ``R = n``, one item per row, which always
    fits) is dealt at once and the smallest ``R`` that fits is kept. On geometric lengths it needs ~4 % more rows
    than first-fit-decreasing.
    """
    n = len(sizes)
    sorted_sizes, order = sizes.sort(descending=True)
    low = max(1, -(-int(sizes.sum()) // width))
    counts = torch.cat([torch.arange(low, min(low + CANDIDATES, n)), torch.tensor([n])]).to(sizes.device)
    k = torch.arange(n, device=sizes.device)
    lap, seat = k // counts[:, None], k % counts[:, None]
    rows = torch.where(lap % 2 == 0, seat, counts[:, None] - 1 - seat)  # [candidates, n]
    sums = torch.zeros(len(counts), n, dtype=sizes.dtype, device=sizes.device)
    sums.scatter_add_(1, rows, sorted_sizes.expand(len(counts), n))
    best = int((sums.amax(1) > width).long().argmin())  # the first candidate that fits (the last always does)
    return torch.empty_like(order).scatter_(0, order, rows[best]), int(counts[best])


def reads_of(response_mask: Tensor) -> Tensor:
    """``[B]`` the outputs a response's log-probs read: up to its last masked-in token (the tokens after it
    predict nothing that is used; masked-out tokens before it are context)."""
    T = response_mask.shape[1]
    return (response_mask.bool() * torch.arange(1, T + 1, device=response_mask.device)).amax(1)


def varlen_attention(model) -> bool:
    """Whether ``model`` attends with a varlen (flash-attention) kernel, which packs into a single row."""
    return "flash" in str(getattr(model.config, "_attn_implementation", ""))


@dataclass
class PackedRows:
    """Where each sequence of a batch lies in ``R`` packed rows of ``width`` tokens (``plan``)."""

    start: Tensor
    """``[B]`` the flat index (``row · width + column``) of each sequence's first token."""
    prompt: Tensor
    """``[B]`` prompt tokens ``P_b``."""
    reads: Tensor
    """``[B]`` outputs read per sequence ``n_b``."""
    sizes: Tensor
    """``[B]`` input tokens per sequence, ``s_b = P_b + n_b − 1`` (0 when ``n_b = 0``)."""
    rows: int
    width: int

    @property
    def positions(self) -> int:
        """Token positions the packed forward computes, ``R · W``."""
        return self.rows * self.width

    @classmethod
    def plan(cls, prompt_lengths: Tensor, reads: Tensor, *, one_row: bool) -> "PackedRows":
        """The layout of sequences of ``prompt_lengths`` ``[B]`` tokens from which ``reads`` ``[B]`` outputs are
        read: one row of ``Σ s_b`` (``one_row``, varlen attention), else rows no wider than the longest sequence
        (``assign_rows``). A ValueError names a row that reads outputs but has no prompt token."""
        empty = (prompt_lengths == 0) & (reads > 0)
        if bool(empty.any()):
            raise ValueError(f"row {int(empty.long().argmax())} has no prompt token: packed rows read the first "
                             f"response token's logits at the last prompt position")
        sizes = torch.where(reads > 0, prompt_lengths + reads - 1, 0)
        width = max(1, int(sizes.sum()) if one_row else int(sizes.max()))
        row, rows = assign_rows(sizes, width)
        order = torch.argsort(row * len(sizes) + torch.arange(len(sizes), device=sizes.device))  # row by row
        before = sizes[order].cumsum(0) - sizes[order]  # tokens of the earlier sequences, over all rows
        first = torch.zeros(rows, dtype=before.dtype, device=before.device).scatter_reduce_(
            0, row[order], before, "amin", include_self=False)  # of each row's first sequence
        start = torch.empty_like(before).scatter_(0, order, row[order] * width + before - first[row[order]])
        return cls(start, prompt_lengths, reads, sizes, rows, width)

    def inputs(self, prompt_ids: Tensor, continuation: Tensor) -> dict[str, Tensor]:
        """``input_ids`` / ``position_ids`` ``[R, W]`` of the packed rows, from left-padded ``prompt_ids``
        ``[B, Tp]`` and right-padded ``continuation`` ``[B, Tc]``. A row's tokens after its last sequence are a
        filler segment of its own (token 0, positions from 0), never read."""
        tokens = torch.cat([prompt_ids, continuation], 1)
        seq = torch.repeat_interleave(torch.arange(len(self.sizes), device=tokens.device), self.sizes)
        j = torch.arange(len(seq), device=tokens.device) - (self.sizes.cumsum(0) - self.sizes)[seq]  # position
        dest = self.start[seq] + j
        column = torch.arange(self.width, device=tokens.device)
        fill = torch.zeros(self.rows, dtype=dest.dtype, device=dest.device).scatter_reduce_(
            0, dest // self.width, dest % self.width + 1, "amax")  # each row's tokens before the filler
        ids = tokens.new_zeros(self.rows * self.width)
        ids[dest] = tokens[seq, prompt_ids.shape[1] - self.prompt[seq] + j]
        position = (column - fill[:, None]).clamp_min(0).flatten()
        position[dest] = j
        return {"input_ids": ids.view(self.rows, self.width), "position_ids": position.view(self.rows, self.width)}

    def unpack(self, out: Tensor, columns: int) -> Tensor:
        """``[B, columns, ...]`` from packed outputs ``out`` ``[R, W, ...]``: sequence b's output ``j`` (at its
        position ``P_b − 1 + j``) for ``j < n_b``, 0 beyond."""
        j = torch.arange(columns, device=out.device)
        read = j < self.reads[:, None]
        index = (self.start[:, None] + self.prompt[:, None] - 1 + j).clamp(0, self.positions - 1)
        return out.flatten(0, 1)[index].masked_fill(~read.view(*read.shape, *[1] * (out.dim() - 2)), 0.0)

    def read(self, model, prompt_ids: Tensor, continuation: Tensor, read: Callable[[object], Tensor]) -> Tensor:
        """``read(model(...))`` over the packed rows, unpacked to ``[B, 1 + Tc, ...]`` (``unpack``)."""
        out = model(**self.inputs(prompt_ids, continuation), use_cache=False)  # a cache would hide the packing
        return self.unpack(read(out), 1 + continuation.shape[1])
