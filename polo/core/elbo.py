"""The sequence ELBO of a masked diffusion LM, estimated by quadrature over the masking ratio (pure tensor math).

A masked diffusion LM has no tractable ``log π(y | q)``; its evidence lower bound over the response positions is

    E(y) = ∫₀¹ E_{y_t} [ (1/t) Σ_i 1[y_t^i masked] log π(y^i | y_t, q) ] dt,

where ``y_t`` masks a fraction ``t`` of ``y``. GDPO ("Improving Reasoning for Diffusion Language Models via Group
Diffusion Policy Optimization", arXiv:2510.08554) evaluates the time integral with a fixed Gauss–Legendre rule of N
nodes ``t_n`` (weights ``w_n`` on [0, 1]) and keeps K random masks per node, each masking exactly
``k_n = min(L, max(1, ⌊t_n·L⌋))`` of the L response positions:

    Ê(y) = Σ_n w_n (1/K) Σ_k (1/t_n) Σ_{i masked by (n, k)} log π(y^i | y_{t_n}^{(k)}, q).

Per position this is ``Σ_{n,k} coef_{n}·log π·masked`` with ``coef_n = w_n / (t_n·K)``; the row sum is Ê(y). The
baseline ``uniform-M`` draws M ratios ``t_m ~ U(0, 1]`` with weights 1/M (plain Monte Carlo over t); ``discrete-M``
draws M mask counts ``k ~ U{1, …, L}`` (``t = k/L``, weight ``L/(k·M)``), LLaDA's estimator of the discrete-time
bound, whose weights stay bounded by L.

Masks are a deterministic function of a row's content (its valid prompt and response tokens, and a salt ``seed``):
the behaviour, reference and current policy therefore see the same masks for a row without any plumbing, and the
difference of their ELBOs reflects the policy change, not mask noise. Keys are integers mixed modulo the prime
2³¹−1 (every product fits in int64), so they are identical on every device.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

PRIME = 2**31 - 1
_MULTIPLIERS = (1_103_515_245 % PRIME, 69_069, 2_147_483_629 % PRIME)

_R3 = math.sqrt(0.6)
RULES: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "gauss-1": ((0.5,), (1.0,)),
    "gauss-2": ((0.5 - 0.5 / math.sqrt(3), 0.5 + 0.5 / math.sqrt(3)), (0.5, 0.5)),
    "gauss-3": ((0.5 - 0.5 * _R3, 0.5, 0.5 + 0.5 * _R3), (5 / 18, 8 / 18, 5 / 18)),
    "simpson": ((0.1, 0.5, 1.0), (1 / 6, 4 / 6, 1 / 6)),
}
"""Fixed rules on [0, 1]: Gauss–Legendre nodes ``t = (x + 1)/2`` with weights ``w_x / 2``; Simpson's rule with its
first node moved from 0 to 0.1 (the integrand has 1/t)."""


@dataclass(frozen=True)
class ElboSettings:
    """How the ELBO is estimated: the rule over t (``gauss-1/2/3``, ``simpson`` or ``uniform-M``), K masks per node
    (``mc_samples``) and the salt of the mask keys (``seed``)."""

    quadrature: str = "gauss-2"
    mc_samples: int = 1
    seed: int = 0

    def __post_init__(self):
        nodes(self.quadrature)  # raises on an unknown rule
        if self.mc_samples < 1:
            raise ValueError(f"mc_samples={self.mc_samples}: expected an integer >= 1 (masks per quadrature node)")

    @property
    def draws(self) -> int:
        """Masked copies of each row one ELBO evaluates: nodes × masks per node."""
        return nodes(self.quadrature) * self.mc_samples


def nodes(quadrature: str) -> int:
    """Number of time points of ``quadrature``; a ValueError naming an unknown rule and the known ones."""
    if quadrature in RULES:
        return len(RULES[quadrature][0])
    head, _, count = quadrature.partition("-")
    if head in ("uniform", "discrete") and count.isdigit() and int(count) >= 1:
        return int(count)
    raise ValueError(f"quadrature={quadrature!r}: expected one of {', '.join(RULES)}, uniform-M (M >= 1 uniformly "
                     f"drawn masking ratios) or discrete-M (M uniformly drawn mask counts)")


def mix(x: Tensor) -> Tensor:
    """A scrambling map of int64 values in ``[0, 2³¹−1)`` onto the same range (affine steps modulo the prime,
    alternated with xor-shifts)."""
    for a in _MULTIPLIERS:
        x = (x * a + 12_345) % PRIME
        x = x ^ (x >> 13)
    return x % PRIME


def _token_terms(ids: Tensor, valid: Tensor, side: int) -> Tensor:
    """One key per valid token from its id and its index among the row's valid tokens (padding-width invariant)."""
    index = valid.long().cumsum(-1)
    terms = mix(ids.long() % PRIME + mix(index + side * 1_000_003))
    return terms * valid.long()


def content_hash(prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor, response_mask: Tensor,
                 seed: int = 0) -> Tensor:
    """``[B]`` int64 key of each row's valid prompt and response tokens (and ``seed``), independent of padding."""
    total = (_token_terms(prompt_ids, prompt_mask.bool(), 1).sum(-1)
             + _token_terms(response_ids, response_mask.bool(), 2).sum(-1)) % PRIME
    return mix(total + mix(torch.full_like(total, seed % PRIME)))


def node_times(quadrature: str, row_key: Tensor, length: Tensor) -> tuple[Tensor, Tensor]:
    """``(t, w)`` ``[B, N]`` float64: the rule's nodes and weights for every row; ``uniform-M`` draws each row's M
    ratios in (0, 1] from its key, ``discrete-M`` its M ratios ``k/L`` with ``k`` uniform in 1..L (``length``
    ``[B]``: L per row)."""
    B, N = row_key.shape[0], nodes(quadrature)
    if quadrature in RULES:
        t, w = (torch.tensor(v, dtype=torch.float64, device=row_key.device).expand(B, N) for v in RULES[quadrature])
        return t, w
    draws = mix(row_key[:, None] + mix(torch.arange(N, device=row_key.device) + 7_777))
    t = (draws.double() + 1) / PRIME
    if quadrature.startswith("discrete"):
        L = length.double().clamp_min(1)[:, None]
        t = (torch.floor(t * L).clamp(max=L - 1) + 1) / L
    return t, torch.full((B, N), 1.0 / N, dtype=torch.float64, device=row_key.device)


def mask_counts(t: Tensor, length: Tensor) -> Tensor:
    """``k = min(L, max(1, ⌊t·L⌋))`` ``[B, N]`` (0 for an empty row) from ratios ``t`` ``[B, N]`` and lengths
    ``[B]``."""
    L = length.long()[:, None]
    k = torch.floor(t * L.double() + 1e-9).long()  # 1e-9: t·L a float hair below an integer counts as it
    return torch.minimum(L, k.clamp_min(1))


def exact_k_masks(keys: Tensor, valid: Tensor, k: Tensor) -> Tensor:
    """``[B, R, T]`` bool: in each of the R draws of a row, the ``k[b, r]`` valid positions with the smallest
    keys (``keys`` ``[B, R, T]`` int64 below 2³¹−1, ``valid`` ``[B, T]``)."""
    keys = keys.masked_fill(~valid.bool()[:, None, :], PRIME)
    rank = keys.argsort(dim=-1, stable=True).argsort(dim=-1, stable=True)
    return (rank < k[..., None]) & valid.bool()[:, None, :]


@dataclass
class ElboLayout:
    """Which positions each draw masks and how much its log-probs count: ``masked`` ``[B, R, T]`` bool and
    ``coef`` ``[B, R]`` = w_n / (t_n·K), draw r = n·K + k."""

    masked: Tensor
    coef: Tensor

    def contributions(self, clean_logp: Tensor) -> Tensor:
        """``[B, T]`` per-position ELBO terms ``Σ_r coef_r·logp·masked`` from the clean tokens' log-probs
        ``[B, R, T]`` under each draw's masked input; the row sum is Ê(y)."""
        return (self.coef[..., None].to(clean_logp) * clean_logp * self.masked).sum(1)


def elbo_layout(settings: ElboSettings, prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor,
                response_mask: Tensor) -> ElboLayout:
    """The masks and coefficients of every row's ELBO draws, derived from the rows' content (module docstring)."""
    row_key = content_hash(prompt_ids, prompt_mask, response_ids, response_mask, settings.seed)
    t, w = node_times(settings.quadrature, row_key, response_mask.sum(-1))
    K, T = settings.mc_samples, response_ids.shape[1]
    k = mask_counts(t, response_mask.sum(-1)).repeat_interleave(K, 1)
    R = k.shape[1]
    draw = torch.arange(R, device=row_key.device)
    keys = mix(row_key[:, None, None] + mix(draw[:, None] * 4_099 + torch.arange(T, device=row_key.device) + 31))
    coef = (w / (t * K)).repeat_interleave(K, 1)
    return ElboLayout(exact_k_masks(keys, response_mask, k), coef.float())
