"""Graph-GRPO: per-choice advantages for set-valued actions made of independent binary choices.

Graph-GRPO: Stabilizing Multi-Agent Topology Learning via Group Relative Policy Optimization (arXiv:2603.02701)
scores each candidate edge of a multi-agent communication graph by the success of the sampled graphs that contain
it (the per-choice form below is reconstructed from the abstract; the authors' code is not public). Generic form: a
policy with C independent Bernoulli choices (edges, tools, documents, agents) samples K sets per query
(``x`` ``[B, K, C]``), each set gets a reward (``r`` ``[B, K]``), and every choice c gets its own advantage:

    n_c = Σ_k x_kc,   S_c = Σ_k x_kc·r_k / n_c          (success rate of the sets that contain c)
    A_c = (S_c − mean_V S) / (std_V S + ε)               over the choices sampled at least once (V), population
                                                         std; A_c = 0 outside V and when all S_c (c ∈ V) agree

The loss is a critic-free policy gradient on the sampled choices, regularised towards a reference policy:

    L = −Σ_{b,k,c} x·A·log p_c / Σ x + β·mean_{b,c} KL(Bern(p_c) ‖ Bern(p_ref,c))

The graph-level baseline (the ablation) gives every chosen c of set k the set's group z-score instead.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from polo.core.segment import group_stats, masked_mean


def _check(x: Tensor, rewards: Tensor) -> None:
    if x.dim() != 3 or rewards.shape != x.shape[:2]:
        raise ValueError(f"expected choices x [B, K, C] and rewards [B, K], got {tuple(x.shape)} and "
                         f"{tuple(rewards.shape)}")
    if not ((x == 0) | (x == 1)).all():
        raise ValueError("choices x must be 0/1 indicators")
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards contain NaN or infinite values")


def choice_advantages(x: Tensor, rewards: Tensor, eps: float = 1e-6) -> Tensor:
    """Per-choice advantages ``A`` ``[B, C]`` (detached) from choices ``x`` ``[B, K, C]`` and rewards ``[B, K]``."""
    _check(x, rewards)
    x, r = x.detach().to(rewards.dtype), rewards.detach()
    n = x.sum(1)
    valid = n > 0
    score = (x * r[:, :, None]).sum(1) / n.clamp_min(1)
    mean = masked_mean(score, valid, dim=-1)[:, None]
    std = masked_mean((score - mean) ** 2, valid, dim=-1).sqrt()[:, None]
    hi = torch.where(valid, score, -torch.inf).amax(-1, keepdim=True)
    lo = torch.where(valid, score, torch.inf).amin(-1, keepdim=True)
    adv = (score - mean) / (std + eps)
    return torch.where(valid & (hi > lo), adv, torch.zeros_like(adv))


def graph_advantages(rewards: Tensor, eps: float = 1e-6) -> Tensor:
    """Graph-level baseline ``[B, K]``: each set's reward z-scored within its query's K sets (unbiased std; a lone
    set keeps its raw reward, polo's group convention)."""
    if rewards.dim() != 2 or not torch.isfinite(rewards).all():
        raise ValueError(f"expected finite rewards [B, K], got shape {tuple(rewards.shape)}")
    b, k = rewards.shape
    flat = rewards.detach().reshape(-1)
    mean, std, _ = group_stats(flat, torch.arange(b, device=rewards.device).repeat_interleave(k))
    return ((flat - mean) / (std + eps)).view(b, k)


def bernoulli_kl(logits: Tensor, ref_logits: Tensor) -> Tensor:
    """``KL(Bern(p) ‖ Bern(q)) = p·log(p/q) + (1−p)·log((1−p)/(1−q))`` elementwise, p = σ(z), q = σ(z_ref)."""
    p = torch.sigmoid(logits)
    return (p * (F.logsigmoid(logits) - F.logsigmoid(ref_logits))
            + (1 - p) * (F.logsigmoid(-logits) - F.logsigmoid(-ref_logits)))


def graph_grpo_loss(logits: Tensor, ref_logits: Tensor, x: Tensor, advantages: Tensor, beta: float
                    ) -> tuple[Tensor, dict[str, Tensor]]:
    """``L = −Σ x·A·log σ(z) / Σ x + β·mean KL(Bern(σ(z)) ‖ Bern(σ(z_ref)))``: logits ``[B, C]`` (one query's K sets
    share them), ``x`` ``[B, K, C]``, ``advantages`` broadcastable to ``x`` (per choice ``[B, 1, C]``, per set
    ``[B, K, 1]``). Only sampled choices (x = 1) get a policy-gradient term; no set sampled → that term is 0."""
    x = x.to(logits.dtype)
    pg = -(x * advantages * F.logsigmoid(logits)[:, None, :]).sum() / x.sum().clamp_min(1)
    kl = bernoulli_kl(logits, ref_logits.detach()).mean()
    return pg + beta * kl, {"loss/policy": pg.detach(), "policy/kl_ref": kl.detach()}
