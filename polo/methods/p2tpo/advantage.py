"""P2TPO: element-level credit for structured outputs (anchor pricing of elements, span credit redistribution)."""
from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field
from torch import Tensor

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.agent_primitives import group_moments, group_norm
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES

ELEMENT_INPUTS = {
    "element_quality": "[N, E] float quality of each reference element in [0, 1] (0 missing, NaN no such element)",
    "element_span": "[N, E, 2] response columns [start, end) of the aligned block (start = end: missing)",
    "element_label": "[N, T] 1 correct / 0 error on block tokens, -1 outside every block",
    "element_boundary": "[N, E] column of a missing element's boundary token, -1 for none",
}


def element_inputs(batch: RolloutBatch, who: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The checked element inputs ``(quality, span, label, boundary)``; ValueError naming ``who`` otherwise."""
    N, T = batch.mask.shape
    got = {}
    for name, meaning in ELEMENT_INPUTS.items():
        where = f"{who} needs the input {name!r} ({meaning}), written by the element_quality provider"
        value = batch.require(name, where)
        if name != "element_quality" and (value.is_floating_point() or value.dtype == torch.bool):
            raise ValueError(f"{where}; got dtype {value.dtype}, expected an integer dtype")
        got[name] = value
    q, span, label, boundary = got.values()
    E = q.shape[-1] if q.dim() == 2 else -1
    if q.shape != (N, E) or span.shape != (N, E, 2) or label.shape != (N, T) or boundary.shape != (N, E):
        raise ValueError(f"{who}: element_quality {tuple(q.shape)}, element_span {tuple(span.shape)}, element_label "
                         f"{tuple(label.shape)} and element_boundary {tuple(boundary.shape)} must be [N, E], "
                         f"[N, E, 2], [N, T], [N, E] with N = {N}, T = {T}")
    finite = q[torch.isfinite(q)]
    if bool(q.isinf().any()) or bool(((finite < 0) | (finite > 1)).any()):
        raise ValueError(f"{who}: element_quality must lie in [0, 1] (NaN for no such element)")
    if bool((boundary >= T).any()):
        raise ValueError(f"{who}: element_boundary has a column ≥ T = {T}")
    return q, span.long(), label.long(), boundary.long()


def anchor_pricing(q: Tensor, valid: Tensor, group: Tensor, q_max: float, tol: float) -> tuple[Tensor, Tensor]:
    """``(a, anchored)``, both ``[N, E]``: UAP per element over the group, ``a = q − q_max`` when every sample
    has the same quality (max − min < tol), else ``a = q − mean_g q``; 0 where the element does not exist. One
    segment per (group, element), computed at once; ``anchored`` marks the existing elements priced against
    q_max."""
    N, E = q.shape
    _, inv = torch.unique(group, return_inverse=True)
    cell = (inv[:, None] * E + torch.arange(E, device=q.device)).flatten()
    x, members = q.nan_to_num(0.0).flatten(), valid.flatten()
    n = int(cell.max()) + 1 if cell.numel() else 0
    hi = x.new_full((n,), -torch.inf).scatter_reduce(0, cell, torch.where(members, x, -torch.inf), "amax")
    lo = x.new_full((n,), torch.inf).scatter_reduce(0, cell, torch.where(members, x, torch.inf), "amin")
    mean = group_moments(x, cell, members)[0]
    same = (hi - lo)[cell] < tol
    return (torch.where(same, x - q_max, x - mean) * members).view(N, E), (same & members).view(N, E)


@ADVANTAGES.register("p2tpo")
class P2TPO(AdvantageEstimator):
    """Token advantages priced per reference element of a structured output (G rollouts per group).

    * UAP: ``a_{i,e} = q_{i,e} − mean_i q_{i,e}``, or ``q_{i,e} − q_max`` when the group's qualities of element
      e are identical (max − min < ``tol``), so an element every sample got equally wrong still gets a negative
      signal (0 at the ceiling); a missing element has q = 0.
    * SCR: the block B_{i,e} aligned to element e carries ``C = a·|B|`` (what broadcasting a would give),
      spread as ``A[i,t] = C·u_t / Σ_{t'∈B} u_{t'}`` with ``u_t = 1 + κ`` on correct and ``1 − κ`` on error
      tokens when a ≥ 0, reversed when a < 0: the block's total is kept, more of a positive credit goes to
      its correct tokens and more of a negative one to its errors (κ = ``kappa``).
    * a missing element charges ``a_{i,e}`` to its boundary token (``A[i, b] += a``).
    * every token outside the blocks gets the page advantage ``U_i − mean_g U``, ``U_i = Σ_e ω_e q_{i,e}``,
      ω uniform over the row's elements (a lone sample: 0).
    * ``scale_by_std``: all of it divided by the group std of U (+ ``eps``).

    Blocks that overlap add their shares. Inputs: ``element_quality``, ``element_span``, ``element_label``,
    ``element_boundary`` (the element_quality provider, from a task's element aligner such as ``fields``).
    Diagnostics: ``p2tpo/anchored_frac`` (elements priced against q_max), ``p2tpo/missing_frac``,
    ``p2tpo/block_token_frac`` (trained tokens inside blocks), ``p2tpo/page_utility``.
    """

    paper = "P2TPO: element-level credit assignment for page-level document parsing (arXiv id not found)"
    provenance = "RECONSTRUCTED"
    requires: ClassVar[frozenset[str]] = frozenset(ELEMENT_INPUTS)

    kappa: float = Field(default=0.5, ge=0, lt=1)
    """SCR contrast κ ∈ [0, 1)."""
    q_max: float = Field(default=1.0, ge=0, le=1)
    """Quality ceiling UAP prices identical elements against."""
    tol: float = Field(default=1e-8, gt=0)
    """Qualities whose group range is below this count as identical."""
    scale_by_std: bool = False
    """Divide every advantage by the group std of the page utility U."""
    eps: float = Field(default=1e-6, gt=0)
    """Added to that std."""

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        mask = batch.mask
        q, span, label, boundary = element_inputs(batch, "advantage p2tpo")
        q = q.to(mask.dtype)
        valid = torch.isfinite(q)
        a, anchored = anchor_pricing(q, valid, batch.group, self.q_max, self.tol)
        N, T = mask.shape
        cols = torch.arange(T, device=mask.device)
        block = valid[..., None] & (cols >= span[..., :1]) & (cols < span[..., 1:])  # [N, E, T]
        sign = torch.where(a >= 0, 1.0, -1.0).to(mask.dtype)
        correct = torch.where(label != 0, 1.0, -1.0).to(mask.dtype)  # inside a block: 1 correct, 0 error
        u = (1 + self.kappa * sign[..., None] * correct[:, None, :]) * block
        size = block.sum(-1).to(mask.dtype)
        share = u / u.sum(-1, keepdim=True).clamp_min(torch.finfo(mask.dtype).tiny)
        adv = ((a * size)[..., None] * share).sum(1)
        n_el = valid.sum(1).clamp_min(1).to(mask.dtype)
        utility = q.nan_to_num(0.0).sum(1) / n_el
        page = group_norm(utility, batch.group, mode="mean", singleton="self_mean")
        inside = block.any(1)
        adv = torch.where(inside, adv, page[:, None])
        missing = valid & (boundary >= 0)
        adv = adv.scatter_add(1, boundary.clamp_min(0), torch.where(missing, a, 0.0))
        if self.scale_by_std:
            adv = adv / (group_moments(utility, batch.group)[1][:, None] + self.eps)
        live = mask > 0
        diagnostics = {
            "p2tpo/anchored_frac": float(anchored.sum() / valid.sum().clamp_min(1)),
            "p2tpo/missing_frac": float(missing.sum() / valid.sum().clamp_min(1)),
            "p2tpo/block_token_frac": float((inside & live).sum() / live.sum().clamp_min(1)),
            "p2tpo/page_utility": float(utility.mean()),
        }
        return AdvantageResult(adv * mask, diagnostics=diagnostics)
