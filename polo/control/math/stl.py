"""Signal Temporal Logic (STL) over batched discrete-time trajectories, and the time grounding TGPO builds on.

TGPO: Temporal Grounded Policy Optimization for Signal Temporal Logic Tasks (arXiv:2510.00225).

Quantitative semantics (robustness; ρ > 0 ⇔ satisfied), for trajectories ``x`` ``[B, H+1, d]``. Every formula
computes its robustness at *every* time step, ``signal(x)`` ``[B, H+1]``, so that temporal operators are sliding
reductions over the time axis:

* predicate ``h(x_t)``: ``reach`` ball (c, r): ``r − ‖x_t − c‖``; ``avoid`` ball: ``‖x_t − c‖ − r``;
* ``¬φ``: ``−ρ(φ)``;  ``φ₁ ∧ φ₂``: ``min``;  ``φ₁ ∨ φ₂``: ``max``;
* ``F_[a,b] φ`` at t: ``max`` of ``ρ(φ, t')`` over ``t' ∈ [t+a, t+b] ∩ [0, H]``; ``G_[a,b]`` the same with ``min``
  (a window past the horizon is cut at H; an empty one gives the operator's identity, −∞ for F, +∞ for G).

Grounding. A conjunction of ``F_[a_k,b_k] ψ_k`` (ψ_k free of F, e.g. ``reach R`` or ``G_[c,d] reach R``) and
F-free invariants becomes timed subgoals "ψ_k holds at τ_k" plus the invariants unchanged. For an allocation τ,
``ρ_τ(x) = min(min_k ρ(ψ_k, x, τ_k), min_j ρ(inv_j, x, 0))``. Each subgoal depends on its own τ_k only, so
``max_τ ρ_τ = ρ(φ)``: some allocation satisfies the grounded formula iff the trajectory satisfies φ, and searching
over τ loses nothing. G-over-F nestings (one subgoal per outer step) are not grounded.

The high-level search over τ: uniform allocations, the rounded-clipped Gaussian random-walk proposal and the
Metropolis–Hastings chain on a score (TGPO: the critic's value of the initial augmented state) with target
density ∝ exp(score/T).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor


def ball_margin(x, center, radius: float):
    """``r − ‖x − c‖`` over the last dim (> 0 inside the ball). Operators only: ``x`` and ``center`` may be torch
    tensors or numpy arrays (the same kind), so environments share it."""
    return radius - ((x - center) ** 2).sum(-1) ** 0.5


def progress_reward(x, x_next, center):
    """``‖x − c‖ − ‖x_next − c‖``: how much one step moved toward ``c`` (torch or numpy, like ``ball_margin``)."""
    return ball_margin(x_next, center, 0.0) - ball_margin(x, center, 0.0)


class Formula:
    """An STL formula; ``signal(x)`` is its robustness at every time step ``[B, H+1]``."""

    def signal(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def robustness(self, x: Tensor) -> Tensor:
        """``ρ(φ, x, 0)`` ``[B]`` of trajectories ``x`` ``[B, H+1, d]``."""
        if x.dim() != 3:
            raise ValueError(f"STL robustness needs trajectories [B, H+1, d], got shape {tuple(x.shape)}")
        if not torch.isfinite(x).all():
            raise ValueError("STL robustness: the trajectory holds NaN or infinite values")
        return self.signal(x)[:, 0]

    def has_eventually(self) -> bool:
        """Whether an ``Eventually`` occurs anywhere inside (grounding needs to know)."""
        return any(child.has_eventually() for child in self.children())

    def children(self) -> tuple["Formula", ...]:
        return ()


@dataclass(frozen=True)
class Ball(Formula):
    """Ball predicate: ``reach`` (inside) ``r − ‖x − c‖`` or ``avoid`` ``‖x − c‖ − r``."""

    center: tuple[float, ...]
    radius: float
    inside: bool = True

    def signal(self, x: Tensor) -> Tensor:
        margin = ball_margin(x, x.new_tensor(self.center), self.radius)
        return margin if self.inside else -margin


def reach(center, radius: float) -> Ball:
    return Ball(tuple(float(c) for c in center), float(radius), True)


def avoid(center, radius: float) -> Ball:
    return Ball(tuple(float(c) for c in center), float(radius), False)


@dataclass(frozen=True)
class Not(Formula):
    phi: Formula

    def signal(self, x: Tensor) -> Tensor:
        return -self.phi.signal(x)

    def children(self) -> tuple[Formula, ...]:
        return (self.phi,)


@dataclass(frozen=True)
class And(Formula):
    parts: tuple[Formula, ...]

    def signal(self, x: Tensor) -> Tensor:
        return torch.stack([p.signal(x) for p in self.parts]).amin(0)

    def children(self) -> tuple[Formula, ...]:
        return self.parts


@dataclass(frozen=True)
class Or(Formula):
    parts: tuple[Formula, ...]

    def signal(self, x: Tensor) -> Tensor:
        return torch.stack([p.signal(x) for p in self.parts]).amax(0)

    def children(self) -> tuple[Formula, ...]:
        return self.parts


def window_reduce(s: Tensor, a: int, b: int, largest: bool) -> Tensor:
    """``out[:, t] = max`` (``largest``) or ``min`` of ``s[:, t']`` over ``t' ∈ [t+a, t+b] ∩ [0, L−1]`` for
    ``s`` ``[B, L]``; the identity (∓∞) where the window is empty."""
    if not 0 <= a <= b:
        raise ValueError(f"a temporal window [a, b] needs 0 <= a <= b, got [{a}, {b}]")
    L = s.shape[1]
    fill = -math.inf if largest else math.inf
    b = min(b, L - 1)
    if a > b:
        return torch.full_like(s, fill)
    padded = torch.cat([s, s.new_full((s.shape[0], b), fill)], dim=1)
    windows = padded[:, a:].unfold(1, b - a + 1, 1)[:, :L]  # [B, L, b−a+1]
    return windows.amax(-1) if largest else windows.amin(-1)


@dataclass(frozen=True)
class Eventually(Formula):
    """``F_[a,b] φ``."""

    phi: Formula
    a: int
    b: int

    def signal(self, x: Tensor) -> Tensor:
        return window_reduce(self.phi.signal(x), self.a, self.b, largest=True)

    def children(self) -> tuple[Formula, ...]:
        return (self.phi,)

    def has_eventually(self) -> bool:
        return True


@dataclass(frozen=True)
class Always(Formula):
    """``G_[a,b] φ``."""

    phi: Formula
    a: int
    b: int

    def signal(self, x: Tensor) -> Tensor:
        return window_reduce(self.phi.signal(x), self.a, self.b, largest=False)

    def children(self) -> tuple[Formula, ...]:
        return (self.phi,)


# ---------------------------------------------------------------------------------------------- grounding
@dataclass(frozen=True)
class Grounding:
    """Timed subgoals (``goals[k]`` must hold at τ_k, an integer in ``[low[k], high[k]]``) and invariants."""

    goals: tuple[Formula, ...]
    low: tuple[int, ...]
    high: tuple[int, ...]
    invariants: tuple[Formula, ...]

    def robustness(self, x: Tensor, tau: Tensor) -> Tensor:
        """``ρ_τ(x)`` ``[B]`` for trajectories ``[B, H+1, d]`` and allocations τ ``[B, m]`` (integers)."""
        check_allocation(tau, self.bounds(), "grounded robustness")
        terms = [g.signal(x).gather(1, tau[:, k:k + 1].long())[:, 0] for k, g in enumerate(self.goals)]
        terms += [inv.robustness(x) for inv in self.invariants]
        return torch.stack(terms).amin(0)

    def bounds(self) -> tuple[Tensor, Tensor]:
        """(low, high) ``[m]`` long tensors."""
        return torch.tensor(self.low, dtype=torch.long), torch.tensor(self.high, dtype=torch.long)


def ground(phi: Formula, horizon: int) -> Grounding:
    """The grounding of ``phi`` over a horizon H (windows cut at H). ``phi`` is ``F_[a,b] ψ``, an F-free formula,
    or a conjunction (``And``, nested ones flattened) of those, ψ itself F-free."""
    parts, todo = [], [phi]
    while todo:
        f = todo.pop(0)
        if isinstance(f, And):
            todo = [*f.parts, *todo]
        else:
            parts.append(f)
    goals, low, high, invariants = [], [], [], []
    for f in parts:
        if not f.has_eventually():
            invariants.append(f)
        elif isinstance(f, Eventually) and not f.phi.has_eventually():
            if f.a > horizon:
                raise ValueError(f"F_[{f.a},{f.b}] starts after the horizon H = {horizon}")
            goals.append(f.phi)
            low.append(f.a)
            high.append(min(f.b, horizon))
        else:
            raise ValueError(f"cannot ground {f}: supported are conjunctions of F_[a,b] ψ with ψ free of F (nesting "
                             "F over G at most) and F-free invariants")
    if not goals:
        raise ValueError(f"{phi} has no F_[a,b] subgoal to allocate a time to")
    return Grounding(tuple(goals), tuple(low), tuple(high), tuple(invariants))


# ---------------------------------------------------------------------------------------------- the τ search
def check_allocation(tau: Tensor, bounds: tuple[Tensor, Tensor], what: str) -> None:
    """A clear error unless τ ``[E, m]`` holds integers inside ``[low, high]``."""
    low, high = bounds
    if tau.dim() != 2 or tau.shape[1] != low.numel():
        raise ValueError(f"{what}: allocations τ must be [E, {low.numel()}], got shape {tuple(tau.shape)}")
    if tau.is_floating_point() and not (torch.isfinite(tau).all() and (tau == tau.round()).all()):
        raise ValueError(f"{what}: allocations τ must be integers, got {tau}")
    if ((tau < low) | (tau > high)).any():
        raise ValueError(f"{what}: allocations τ must lie in [{low.tolist()}, {high.tolist()}], got {tau.tolist()}")


def uniform_allocation(low: Tensor, high: Tensor, n: int, generator: torch.Generator | None = None) -> Tensor:
    """``n`` allocations ``[n, m]`` drawn uniformly from the integers of ``Π_k [low_k, high_k]``."""
    u = torch.rand(n, low.numel(), generator=generator, dtype=torch.float64)
    return (low + (u * (high - low + 1)).floor().long()).minimum(high)


def propose(tau: Tensor, sigma: float, low: Tensor, high: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """``clip(round(τ + σ·ε), low, high)``, ε ~ N(0, I): a Gaussian random walk on the integers (symmetric away
    from the bounds; clipping piles the mass that falls outside onto them)."""
    eps = torch.randn(tau.shape, generator=generator, dtype=torch.float64)
    return (tau + sigma * eps).round().long().clamp(low, high)


def mh_acceptance(v_new: Tensor, v_old: Tensor, temperature: float) -> Tensor:
    """``α = min(1, exp((V' − V)/T))``: the Metropolis–Hastings acceptance for the target density ∝ exp(V/T)."""
    if not temperature > 0:
        raise ValueError(f"the Metropolis–Hastings temperature must be > 0, got {temperature}")
    return torch.exp(((v_new - v_old) / temperature).clamp(max=0.0))


def _finite(value: Tensor) -> Tensor:
    if not torch.isfinite(value).all():
        raise ValueError(f"metropolis_hastings: the score of an allocation is NaN or infinite: {value.tolist()}")
    return value


@dataclass
class ChainResult:
    final: Tensor
    """τ after the last step ``[E, m]``."""
    best: Tensor
    """The highest-scoring τ the chain visited ``[E, m]``."""
    final_score: Tensor
    best_score: Tensor
    acceptance: float
    """Fraction of accepted proposals."""


def metropolis_hastings(score: Callable[[Tensor], Tensor], tau: Tensor, low: Tensor, high: Tensor, sigma: float,
                        temperature: float, steps: int, generator: torch.Generator | None = None) -> ChainResult:
    """``E`` independent chains from τ ``[E, m]``: ``steps`` times propose ``τ'`` (``propose``), accept with
    ``mh_acceptance(score(τ'), score(τ), T)``; ``score`` maps allocations ``[E, m]`` to ``[E]``."""
    check_allocation(tau, (low, high), "metropolis_hastings")
    if steps < 0:
        raise ValueError(f"metropolis_hastings: steps must be >= 0, got {steps}")
    tau = tau.long()
    value = _finite(score(tau))
    best, best_value = tau.clone(), value.clone()
    accepted = 0
    for _ in range(steps):
        candidate = propose(tau, sigma, low, high, generator)
        cand_value = _finite(score(candidate))
        alpha = mh_acceptance(cand_value, value, temperature)
        take = torch.rand(alpha.shape, generator=generator, dtype=torch.float64) < alpha
        tau = torch.where(take[:, None], candidate, tau)
        value = torch.where(take, cand_value, value)
        better = value > best_value
        best, best_value = torch.where(better[:, None], tau, best), torch.where(better, value, best_value)
        accepted += int(take.sum())
    return ChainResult(tau, best, value, best_value, accepted / max(steps * tau.shape[0], 1))
