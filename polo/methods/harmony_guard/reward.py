"""HarmonyGuard's dual-objective step reward: utility for aligned steps, a penalty for risky ones, the outcome.

HarmonyGuard ("HarmonyGuard: Toward Safety and Utility in Web Agents via Adaptive Policy Enhancement and
Dual-Objective Optimization", arXiv:2508.04010) checks each step for threat risk and task alignment; as an RL
reward (our reading; the paper trains nothing) each turn t of an episode gets

    r_t = μ·1[aligned_t] − λ·1[risky_t] + o_t,

where o_t is the environment's own reward of the turn (the task outcome on the final turn, 0 before it in a
sparse-reward task). The episode return is Σ_t r_t. Example: risky [0,0,1,0], aligned [1,0,1,1], outcome
[0,0,0,1], μ = 0.1, λ = 1 → r = [0.1, 0.0, −0.9, 1.1], return 0.3.
"""
from __future__ import annotations

import torch
from torch import Tensor


def _flag(name: str, x: Tensor) -> Tensor:
    x = torch.as_tensor(x).float()
    if not bool(((x == 0) | (x == 1)).all()):
        raise ValueError(f"dual_objective_rewards: {name} must hold 0/1 flags, got {x.tolist()}")
    return x


def dual_objective_rewards(risky: Tensor, aligned: Tensor, outcome: Tensor, mu: float = 0.1,
                           lam: float = 1.0) -> Tensor:
    """``r_t`` of every turn (``[N]`` each; see the module docstring). NaN outcomes or non-0/1 flags raise."""
    outcome = torch.as_tensor(outcome).float()
    if not (risky.shape == aligned.shape == outcome.shape):
        raise ValueError(f"dual_objective_rewards: risky {tuple(risky.shape)}, aligned {tuple(aligned.shape)} and "
                         f"outcome {tuple(outcome.shape)} must have one shape")
    if not bool(torch.isfinite(outcome).all()):
        raise ValueError("dual_objective_rewards: the outcome rewards hold NaN or infinite values")
    if mu < 0 or lam < 0:
        raise ValueError(f"dual_objective_rewards: mu={mu} and lam={lam} must be >= 0")
    return mu * _flag("aligned", aligned) - lam * _flag("risky", risky) + outcome
