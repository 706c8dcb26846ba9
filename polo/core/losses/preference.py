"""Pairwise preference losses: DPO, IPO and MNPO/INPO, on batches whose groups are (chosen, rejected) pairs.

Every pair is one group of two rows; ``extras["chosen"]`` is 1.0 on the preferred row and 0.0 on the other
(the ``preference_pairs`` engine writes it for offline pairs, the ``chosen`` provider for sampled ones). A pair
whose ``extras["pair_valid"]`` is 0 (a reward tie) contributes nothing. Per pair, with sequence log-likelihoods
``s(y) = Σ_t log π(y_t | x, y_<t)`` (sums over the response tokens):

``ρ(y) = s_θ(y) − s_ref(y)`` (the log-ratio to the reference), ``h = ρ(y_w) − ρ(y_l)``.

The losses return ``LossOutput.loss`` = Σ_pairs ℓ / (pairs in the micro-batch, tied ones included), so that
the updater's weighting of micro-batches by their share of the minibatch's rows gives the mean over the
minibatch's pairs whatever the micro-batch size. ``token_loss`` spreads each pair's ℓ evenly over its two
rows' tokens (metrics only).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import Field, field_validator
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.losses.base import LossOutput, PolicyLoss
from polo.core.registry import POLICY_LOSSES
from polo.core.segment import segment_sum


def sequence_sum(x: Tensor, mask: Tensor) -> Tensor:
    """``Σ_t x`` over the valid tokens of each row, ``[B]`` (masked tokens never count, even NaN ones)."""
    return torch.where(mask > 0, x, 0.0).sum(-1)


def sequence_mean(x: Tensor, mask: Tensor) -> Tensor:
    """``Σ_t x / Σ_t mask`` per row, ``[B]`` (0 for a row without valid tokens)."""
    return sequence_sum(x, mask) / mask.sum(-1).clamp_min(1)


@dataclass
class Pairs:
    """The pairs of a batch: ``inv`` ``[B]`` each row's pair, ``sign`` ``[B]`` +1 on chosen rows and −1 on
    rejected ones, ``valid`` ``[P]`` the pairs that count, ``P`` the number of pairs (valid or not)."""

    inv: Tensor
    sign: Tensor
    valid: Tensor
    P: int

    @classmethod
    def of(cls, batch: RolloutBatch, who: str) -> "Pairs":
        """Pairs from ``batch.group`` and ``extras["chosen"]`` (``pair_valid`` optional); a ValueError naming
        ``who`` for a group that is not two rows, or a counted pair without exactly one chosen row."""
        chosen = batch.extras.get("chosen")
        if chosen is None:
            raise ValueError(f"policy_loss {who} needs extras['chosen'] (1.0 on each pair's preferred row): use "
                             f"engine preference_pairs, or the chosen provider with rollout.samples_per_prompt 2")
        chosen = chosen.to(batch.mask.device) > 0.5
        _, inv = torch.unique(batch.group, return_inverse=True)
        P = int(inv.max()) + 1 if inv.numel() else 0
        ones = torch.ones_like(batch.mask[:, 0])
        size = segment_sum(ones, inv, P)
        if bool((size != 2).any()):
            raise ValueError(f"policy_loss {who} trains on pairs: every group must hold 2 rows (chosen and "
                             f"rejected), got group sizes {sorted(set(size.long().tolist()))}")
        valid = torch.ones(P, dtype=torch.bool, device=inv.device)
        if "pair_valid" in batch.extras:
            valid = segment_sum(batch.extras["pair_valid"].to(ones), inv, P) == 2
        n_chosen = segment_sum(chosen.to(ones), inv, P)
        if bool((valid & (n_chosen != 1)).any()):
            raise ValueError(f"policy_loss {who}: a pair must have exactly one chosen row (extras['chosen'] = 1), "
                             f"got {sorted(set(n_chosen[valid].long().tolist()))} chosen rows in a pair")
        return cls(inv, torch.where(chosen, 1.0, -1.0).to(ones), valid, P)

    def per_pair(self, x: Tensor, weight: Tensor) -> Tensor:
        """``Σ_{rows of the pair} weight·x``, ``[P, ...]`` (``x`` ``[B, ...]``, ``weight`` ``[B]``); 0 on pairs
        that do not count (rows of weight 0 and of such pairs never enter, so a NaN there stays out)."""
        shape = (-1, *[1] * (x.dim() - 1))
        rows = (self.valid[self.inv] & (weight != 0)).view(shape)
        return segment_sum(torch.where(rows, weight.view(shape) * x, 0.0), self.inv, self.P)

    def diff(self, x: Tensor) -> Tensor:
        """``x(y_w) − x(y_l)`` per pair, ``[P, ...]``; 0 on pairs that do not count."""
        return self.per_pair(x, self.sign)

    def side(self, x: Tensor, chosen: bool) -> Tensor:
        """``x`` of each pair's chosen (or rejected) row, ``[P, ...]``; 0 on pairs that do not count."""
        return self.per_pair(x, (self.sign > 0 if chosen else self.sign < 0).to(self.sign))

    def mean(self, x: Tensor) -> Tensor:
        """Mean of a per-pair ``[P]`` value over the pairs that count (0 when none does)."""
        return torch.where(self.valid, x, 0.0).sum() / self.valid.sum().clamp_min(1)


class PairwiseLoss(PolicyLoss):
    """Shared frame of the pairwise losses: sequence log-likelihoods, the per-pair loss ``pair_loss``, the
    normalisation and the metrics (over the pairs that count): ``reward_accuracy`` (fraction with implicit
    reward margin ``h > 0``), ``reward_margin`` (``reward_scale·h``), ``chosen_log_ratio`` / ``rejected_log_ratio``
    (``ρ(y_w)``, ``ρ(y_l)``) and ``pairs_used``."""

    whole_groups: ClassVar[bool] = True
    group_size: ClassVar[int | None] = 2
    requires = frozenset({"ref_logp", "chosen"})

    @property
    def reward_scale(self) -> float:
        """The factor of the implicit reward ``scale·ρ`` that the metrics report."""
        return 1.0

    def sequence(self, x: Tensor, mask: Tensor) -> Tensor:
        """Sequence log-likelihood of each row from its token log-probs: the sum."""
        return sequence_sum(x, mask)

    def pair_loss(self, pairs: Pairs, h: Tensor, batch: RolloutBatch, logp_seq: Tensor) -> tuple[Tensor, dict]:
        """``[P]`` loss of each pair (any value on pairs that do not count) and extra metrics."""
        raise NotImplementedError

    def __call__(self, logp: Tensor, batch: RolloutBatch) -> LossOutput:
        mask = batch.mask
        pairs = Pairs.of(batch, self.registry_name)
        seq = self.sequence(logp, mask)
        rho = seq - self.sequence(batch.ref_logp, mask)
        h = pairs.diff(rho)
        per_pair, extra = self.pair_loss(pairs, h, batch, seq)
        per_pair = torch.where(pairs.valid, per_pair, 0.0)
        loss = per_pair.sum() / max(pairs.P, 1)
        with torch.no_grad():
            share = per_pair[pairs.inv] / 2
            token_loss = share[:, None] * mask / mask.sum(-1, keepdim=True).clamp_min(1)
            hd = h.detach()
            metrics = {
                "reward_accuracy": pairs.mean((hd > 0).to(hd)),
                "reward_margin": pairs.mean(self.reward_scale * hd),
                "chosen_log_ratio": pairs.mean(pairs.side(rho.detach(), chosen=True)),
                "rejected_log_ratio": pairs.mean(pairs.side(rho.detach(), chosen=False)),
                "pairs_used": pairs.valid.to(hd).mean() if pairs.P else torch.zeros(()),
                **{k: v.detach() for k, v in extra.items()},
            }
        return LossOutput(token_loss, metrics, loss=loss)


@POLICY_LOSSES.register("dpo")
class DPO(PairwiseLoss):
    """DPO: ``ℓ = −log σ(β·h)``, ``h = [s_θ(y_w) − s_ref(y_w)] − [s_θ(y_l) − s_ref(y_l)]`` with sequence sums: the
    Bradley–Terry likelihood of the preference under the implicit reward ``β·(s_θ − s_ref)``. Offline on a
    file's pairs (engine ``preference_pairs``), or online on two sampled completions per prompt labelled by the
    reward (the ``chosen`` provider; "Direct Language Model Alignment from Online AI Feedback",
    arXiv:2402.04792)."""

    paper = "Direct Preference Optimization: Your Language Model is Secretly a Reward Model (arXiv:2305.18290)"
    provenance = "PAPER"

    beta: float = Field(0.1, gt=0)
    """β: the inverse temperature of the implicit reward (how far the policy may move from the reference)."""

    @property
    def reward_scale(self) -> float:
        return self.beta

    def pair_loss(self, pairs, h, batch, logp_seq):
        return -F.logsigmoid(self.beta * h), {}


@POLICY_LOSSES.register("ipo")
class IPO(PairwiseLoss):
    """IPO: ``ℓ = (h − 1/(2τ))²``: the log-ratio margin is regressed onto a fixed target instead of pushed to
    infinity, so it stays bounded even when the preferences are deterministic.

    ``reduction: sum`` uses sequence log-likelihood sums, the paper's ``log π(y)``; ``mean`` averages the token
    log-probs of each response (TRL's IPO, which makes the target independent of the responses' lengths)."""

    paper = ("A General Theoretical Paradigm to Understand Learning from Human Preferences (arXiv:2310.12036)")
    provenance = "PAPER"

    tau: float = Field(0.1, gt=0)
    """τ: the regularisation strength; the margin target is 1/(2τ)."""
    reduction: Literal["sum", "mean"] = "sum"
    """How a response's token log-probs make its log-likelihood: ``sum`` (the paper) or ``mean`` (TRL)."""

    @property
    def reward_scale(self) -> float:
        return self.tau

    def sequence(self, x: Tensor, mask: Tensor) -> Tensor:
        return sequence_sum(x, mask) if self.reduction == "sum" else sequence_mean(x, mask)

    def pair_loss(self, pairs, h, batch, logp_seq):
        return (h - 1 / (2 * self.tau)) ** 2, {}


@POLICY_LOSSES.register("mnpo")
class MNPO(PairwiseLoss):
    """MNPO, and INPO as its one-opponent case: the policy's chosen-vs-rejected log-likelihood gap is regressed onto
    a mix of the reference's and past policies' gaps plus a margin.

    With ``Δ_m = s_m(y_w) − s_m(y_l)`` for the policy θ, the reference and each history model h (sequence sums;
    ``history_logp`` ``[B, H]``, most recent first), ``λ_h = w_h / Σ w`` (uniform when Σ w = 0):
    ``u = Δ_θ − ρ·Δ_ref − (1 − ρ)·Σ_h λ_h Δ_h``, ``ℓ = (u − 1/(2η))²``. The history models are the policy at the
    start of the current and previous iterations (role ``history``); INPO is H = 1, ``weights: [1.0]``, and so is
    any H with the weight on the most recent model alone (the authors' default ``[1.0, 0.0]``).
    Metrics add ``mnpo_u`` (mean u), ``mnpo_mix_gap`` (mean over pairs of ``|Σ_h λ_h Δ_h − Δ_1|``, how far the
    opponent mix is from the most recent iterate alone: ``(1 − ρ)`` times it is how far u is from INPO's; 0 while
    the older iterates equal the most recent one) and ``mnpo_distinct_iterates`` (how many of the H history models
    give different log-likelihoods on the batch: slots not filled yet all hold the initial policy and count once);
    the reported implicit reward is ``β·ρ``.
    Papers: MNPO; "Iterative Nash Policy Optimization: Aligning LLMs with General Preferences via No-Regret
    Learning" (arXiv:2407.00617)."""

    paper = "Multiplayer Nash Preference Optimization (arXiv:2509.23102)"
    provenance = "CODE"
    requires = frozenset({"ref_logp", "chosen", "history_logp"})

    ratio: float = Field(1 / 3, ge=0, le=1)
    """ρ: the reference's share of the opponent mix (the history models share 1 − ρ)."""
    eta: float = Field(0.0075, gt=0)
    """η: the margin target is 1/(2η)."""
    weights: list[float] = [1.0, 0.0]
    """w_h of the history models, most recent first; as many as the ``history`` role's ``size``. The default is the
    authors' code's, which puts all weight on the most recent model (INPO); the ``mnpo`` recipe ships the paper's."""
    beta: float = Field(10.0, gt=0)
    """Scale of the logged implicit reward β·ρ (not in the loss)."""

    @field_validator("weights")
    @classmethod
    def _non_negative(cls, weights: list[float]) -> list[float]:
        if not weights or any(w < 0 for w in weights):
            raise ValueError(f"expected one non-negative weight per history model, got {weights}")
        return weights

    @property
    def reward_scale(self) -> float:
        return self.beta

    def mixture(self) -> Tensor:
        """``λ_h = w_h / Σ w``, uniform when every weight is 0."""
        w = torch.tensor(self.weights, dtype=torch.float64)
        return w / w.sum() if w.sum() > 0 else torch.full_like(w, 1 / len(w))

    def pair_loss(self, pairs, h, batch, logp_seq):
        history = batch.extras.get("history_logp")
        if history is None or history.dim() != 2 or history.shape[1] != len(self.weights):
            got = None if history is None else tuple(history.shape)
            raise ValueError(f"policy_loss mnpo: weights has {len(self.weights)} entries, so history_logp must be "
                             f"[B, {len(self.weights)}] (one column per history model; set roles.history.size="
                             f"{len(self.weights)}), got shape {got}")
        mask = batch.mask
        d_pi = pairs.diff(logp_seq)
        d_ref = pairs.diff(sequence_sum(batch.ref_logp, mask))
        d_each = pairs.diff(history.to(d_pi))  # [P, H]
        d_hist = d_each @ self.mixture().to(d_pi)
        u = d_pi - self.ratio * d_ref - (1 - self.ratio) * d_hist
        distinct = torch.unique(history, dim=1).shape[1]
        return (u - 1 / (2 * self.eta)) ** 2, {"mnpo_u": pairs.mean(u.detach()),
                                                "mnpo_mix_gap": pairs.mean((d_hist - d_each[:, 0]).abs()),
                                                "mnpo_distinct_iterates": d_pi.new_tensor(float(distinct))}
