"""Fisher-information exploration objectives for system identification: BOED (trace of the FIM) and QOED, from
"Quasi-Optimal Experimental Design for Active System Identification" (arXiv:2605.12084).

Parameters ``θ ∈ R^p`` carry a Gaussian belief ``N(m, Σ)``; an observation ``y ∈ R^{d_y}`` has noise
``R = σ² I``. The Fisher information of a trajectory is ``F = Σ_t J_tᵀ R⁻¹ J_t`` with ``J_t = ∂y_{t+1}/∂θ``
(central finite differences). BOED rewards ``tr F``. QOED first picks from the history FIM the set ``S`` of
parameters that are identifiable and not redundant (``identifiable_mask``) and rewards only the information about
``S`` that survives marginalising the rest ``N``: ``tr(F_SS − F_SN (F_NN + ρI)⁺ F_NS)``. Everything here is
batched over leading dimensions (``K`` candidate trajectories) except the mask selection, which is one ``[p]`` mask.
"""
from __future__ import annotations

from typing import Callable, Literal

import torch
from torch import Tensor

from polo.core.registry import ConfigError

Objective = Literal["boed", "qoed", "agnostic", "none"]
OBJECTIVES = ("boed", "qoed", "agnostic", "none")


# ---------------------------------------------------------------------------------------------- finite differences
def fd_steps(theta: Tensor, epsilon: float = 0.01, floor: float = 1.0) -> Tensor:
    """Central-difference steps ``ε_i = epsilon·(|θ_i| + floor)`` ``[p]``."""
    return epsilon * (theta.abs() + floor)


def perturbed_thetas(theta: Tensor, steps: Tensor) -> Tensor:
    """``[2p, p]``: rows ``θ + ε_i e_i`` (i = 0..p−1) then rows ``θ − ε_i e_i``."""
    shift = torch.diag(steps)
    return torch.cat([theta + shift, theta - shift], 0)


def central_jacobian(y: Tensor, steps: Tensor, difference: Callable[[Tensor, Tensor], Tensor] = torch.sub) -> Tensor:
    """Jacobians from outputs at ``perturbed_thetas``: ``y`` ``[2p, *batch, d_y]`` → ``J`` ``[*batch, d_y, p]``,
    ``J[..., :, i] = difference(y(θ + ε_i e_i), y(θ − ε_i e_i)) / (2ε_i)`` (``difference`` wraps angles)."""
    p = steps.shape[0]
    if y.shape[0] != 2 * p:
        raise ValueError(f"central_jacobian needs 2p = {2 * p} perturbed outputs, got {y.shape[0]}")
    d = difference(y[:p], y[p:]) / (2 * steps.to(y)).reshape(p, *([1] * (y.dim() - 1)))
    return d.movedim(0, -1)


# ---------------------------------------------------------------------------------------------- Fisher information
def symmetrize(fim: Tensor) -> Tensor:
    """``½(F + Fᵀ)`` over the last two dims."""
    return 0.5 * (fim + fim.transpose(-1, -2))


def fisher_information(jac: Tensor, noise_std: float) -> Tensor:
    """Per-step FIM ``Jᵀ R⁻¹ J = JᵀJ/σ²``: ``jac`` ``[..., d_y, p]`` → ``[..., p, p]`` (symmetrised); sum the
    result over the time dim for a trajectory's ``F``."""
    return symmetrize(jac.transpose(-1, -2) @ jac) / noise_std ** 2


def _variances(cov: Tensor) -> Tensor:
    return cov if cov.dim() == 1 else torch.diagonal(cov)


def active_parameters(cov: Tensor, var_threshold: float) -> Tensor:
    """``[p]`` bool: parameters still uncertain, ``Σ_ii ≥ var_threshold`` (``cov`` ``[p, p]`` or its diagonal)."""
    return _variances(cov) >= var_threshold


def identifiable_mask(fim: Tensor, cov: Tensor | None = None, eig_ratio: float = 0.01, dist_threshold: float = 0.05,
                      contrib_ratio: float = 1e-3, var_threshold: float = 0.0025, eig_floor: float = 0.1) -> Tensor:
    """The identifiable, non-redundant set ``S`` ``[p]`` (bool) from a FIM ``[p, p]``.

    Restrict ``F`` to the active parameters, eigen-decompose it (``λ_1 ≥ λ_2 ≥ …``, columns ``V_k``); nothing is
    identifiable when ``λ_1 ≤ eig_floor``. The observable subspace is ``{k : λ_k ≥ eig_ratio·λ_1}``
    (``n_obs`` directions); parameter ``i`` weighs ``s_i = Σ_{k obs} V_ik²`` in it and is a candidate when active
    and ``s_i ≥ contrib_ratio·max s``. Its unit direction ``w_i = V_{i,obs}/√s_i``. Greedily, by descending
    ``s_i``, a candidate still in the pool joins ``S`` and removes from the pool every ``j`` with
    ``1 − |w_j·w_i| < dist_threshold`` (near-collinear, itself included), until ``|S| = n_obs``."""
    if fim.dim() != 2 or fim.shape[0] != fim.shape[1]:
        raise ValueError(f"identifiable_mask needs one square FIM [p, p], got shape {tuple(fim.shape)}")
    if not torch.isfinite(fim).all():
        raise ValueError("identifiable_mask: the FIM has non-finite entries")
    p = fim.shape[0]
    active = torch.ones(p, dtype=torch.bool) if cov is None else active_parameters(cov, var_threshold)
    on = active.to(fim)
    vals, vecs = torch.linalg.eigh(symmetrize(fim) * on[:, None] * on[None])
    order = torch.argsort(vals, descending=True, stable=True)
    vals, vecs = vals[order], vecs[:, order]
    selected = torch.zeros(p, dtype=torch.bool)
    if p == 0 or float(vals[0]) <= eig_floor:
        return selected
    observed = vecs[:, vals >= eig_ratio * vals[0]]
    n_obs = observed.shape[1]
    scores = observed.square().sum(1)
    pool = active & (scores >= contrib_ratio * scores.max())
    w = observed / scores.sqrt().clamp_min(1e-9)[:, None]
    for i in torch.argsort(scores, descending=True, stable=True).tolist():
        if int(selected.sum()) >= n_obs:
            break
        if pool[i]:
            selected[i] = True
            pool &= 1.0 - (w @ w[i]).abs() >= dist_threshold
    return selected


# ---------------------------------------------------------------------------------------------- objectives
def boed_objective(fim: Tensor) -> Tensor:
    """``tr F`` ``[...]``."""
    return torch.diagonal(fim, dim1=-2, dim2=-1).sum(-1)


def agnostic_objective(fim: Tensor, mask: Tensor) -> Tensor:
    """QOED-agnostic ``Σ_{i∈S} F_ii`` ``[...]``."""
    return (torch.diagonal(fim, dim1=-2, dim2=-1) * mask.to(fim)).sum(-1)


def schur_objective(fim: Tensor, mask: Tensor, ridge: float = 1e-3) -> Tensor:
    """QOED ``tr(F_SS − F_SN (F_NN + ridge·I)⁺ F_NS)`` ``[...]`` with ``N`` the complement of ``S``: the
    information about ``S`` left after marginalising ``N``; ``tr F`` when ``S`` is everything, 0 when empty."""
    mask = mask.bool()
    if not mask.any():
        return fim.new_zeros(fim.shape[:-2])
    if mask.all():
        return boed_objective(fim)
    keep, drop = mask.nonzero().flatten(), (~mask).nonzero().flatten()
    fim = symmetrize(fim)
    f_ss = fim[..., keep[:, None], keep]
    f_sn = fim[..., keep[:, None], drop]
    f_nn = fim[..., drop[:, None], drop] + ridge * torch.eye(drop.numel(), dtype=fim.dtype)
    return boed_objective(f_ss - f_sn @ torch.linalg.pinv(f_nn, hermitian=True) @ f_sn.transpose(-1, -2))


def information(fim: Tensor, mask: Tensor, objective: Objective, ridge: float = 1e-3) -> Tensor:
    """The exploration score ``[K]`` of candidate FIMs ``[K, p, p]`` under ``objective`` (none: zeros)."""
    if objective == "boed":
        return boed_objective(fim)
    if objective == "agnostic":
        return agnostic_objective(fim, mask)
    if objective == "qoed":
        return schur_objective(fim, mask, ridge)
    if objective == "none":
        return fim.new_zeros(fim.shape[:-2])
    raise ConfigError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")


def step_bonus(sensitivity: Tensor, trace: Tensor, objective: Objective, threshold: float = 0.1,
               ridge: float = 1e-3) -> Tensor:
    """Per-step bonus from squared sensitivities ``g`` ``[..., p]`` (≥ 0), with ``1 = [Σg > threshold]``:
    agnostic ``max g · 1``; QOED ``max g · ridge/(ridge + max(Σg − max g, 0)) · 1`` (the strongest parameter,
    discounted by the sensitivity the others share); BOED the given ``trace``."""
    if objective == "boed":
        return trace
    total, top = sensitivity.sum(-1), sensitivity.max(-1).values
    gate = (total > threshold).to(sensitivity)
    if objective == "agnostic":
        return top * gate
    if objective == "qoed":
        return top * ridge / (ridge + (total - top).clamp_min(0.0)) * gate
    raise ConfigError(f"step_bonus objective must be boed, qoed or agnostic, got {objective!r}")


# ---------------------------------------------------------------------------------------------- MPPI
def mppi_weights(costs: Tensor, temperature: float) -> Tensor:
    """``w_k = softmax(−(c_k − min c)/λ)`` ``[K]``; non-finite costs get weight 0 (all of them: an error)."""
    finite = torch.isfinite(costs)
    if not finite.any():
        raise ValueError("mppi_weights: every candidate's cost is non-finite")
    costs = torch.where(finite, costs, torch.full_like(costs, float("inf")))
    return torch.softmax(-(costs - costs.min()) / temperature, 0)


def mppi_update(controls: Tensor, costs: Tensor, temperature: float, low: Tensor, high: Tensor) -> Tensor:
    """New control sequence ``clamp(Σ_k w_k U_k, low, high)`` from candidates ``[K, H, d_u]`` and costs ``[K]``."""
    w = mppi_weights(costs, temperature)
    return torch.clamp(torch.einsum("k,khd->hd", w, controls), low, high)


# ---------------------------------------------------------------------------------------------- posterior
def cem_minimize(cost: Callable[[Tensor], Tensor], mean: Tensor, std: Tensor, generator: torch.Generator,
                 samples: int, elites: int, iterations: int, low: Tensor | float, high: Tensor | float,
                 frozen: Tensor | None = None) -> Tensor:
    """Cross-entropy minimisation of ``cost`` (``[n, p]`` → ``[n]``) from ``N(mean, diag std²)``: each iteration
    draws ``samples`` points clamped to ``[low, high]`` (``frozen`` parameters kept at ``mean``), keeps the
    ``elites`` cheapest (non-finite costs last) and refits mean and std to them; returns the final mean
    (``frozen`` entries unchanged)."""
    if not 1 <= elites <= samples:
        raise ConfigError(f"cem elites must be in [1, samples={samples}], got {elites}")
    frozen = torch.zeros_like(mean, dtype=torch.bool) if frozen is None else frozen
    mu = mean
    for _ in range(iterations):
        noise = torch.randn(samples, mean.shape[0], generator=generator, dtype=mean.dtype)
        theta = torch.where(frozen, mean, torch.clamp(mu + noise * std, low, high))
        c = torch.nan_to_num(cost(theta), nan=float("inf"))
        best = theta[torch.topk(-c, elites).indices]
        mu, std = best.mean(0), best.std(0, unbiased=False) + 1e-9
    return torch.where(frozen, mean, mu)


def gaussian_posterior_cov(cov: Tensor, fisher_diag: Tensor, active: Tensor, floor: float = 1e-10) -> Tensor:
    """Laplace-style covariance update ``Σ' = (Σ⁻¹ + diag(F))⁻¹`` (diagonal clamped ≥ ``floor``); the rows and
    columns of inactive parameters keep their prior values."""
    eye = torch.eye(cov.shape[0], dtype=cov.dtype)
    post = symmetrize(torch.linalg.inv(torch.linalg.pinv(cov, hermitian=True) + torch.diag(fisher_diag.clamp_min(0.0))
                                       + 1e-9 * eye))
    post = post + torch.diag(torch.diagonal(post).clamp_min(floor) - torch.diagonal(post))
    keep = active[:, None] & active[None]
    return torch.where(keep, post, cov)
