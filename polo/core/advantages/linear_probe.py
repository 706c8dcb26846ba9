"""A linear value probe in torch: standard scaler → optional per-block PCA → ridge with unpenalized intercept.

The fitted probe is a dict of tensors (``mean``, ``scale``, ``projection``, ``weight``, ``bias``), so a
component can checkpoint it as is. PCA and scaling fold into one ``projection`` matrix.
"""
from __future__ import annotations

import torch
from torch import Tensor


def pca_projection(z: Tensor, blocks: list[tuple[int, int, int | None]]) -> Tensor:
    """Block-diagonal ``[F, F']``: for each column block ``(start, stop, k)`` its top-k principal directions
    of the (centered) rows ``z``, or the identity when k is None; k is capped at the block's rank bound."""
    parts = []
    for start, stop, k in blocks:
        width = stop - start
        if k is None or k >= min(width, z.shape[0]):
            block = torch.eye(width, dtype=z.dtype, device=z.device)
        else:
            zb = z[:, start:stop]
            block = torch.linalg.svd(zb - zb.mean(0), full_matrices=False).Vh[:k].T
        parts.append(block)
    return torch.block_diag(*parts)


def fit_probe(x: Tensor, y: Tensor, alpha: float, blocks: list[tuple[int, int, int | None]]) -> dict[str, Tensor]:
    """Fit on rows ``x`` ``[N, F]``, targets ``y`` ``[N]`` (float64): ``z = (x − μ)/σ`` (population σ, 1 where
    σ = 0), ``p = z·P`` (PCA), ``w = (p_cᵀp_c + αI)⁻¹ p_cᵀ(y − ȳ)`` on centered p, ``b = ȳ − p̄·w``."""
    x, y = x.double(), y.double()
    mean, scale = x.mean(0), x.std(0, unbiased=False)
    scale = torch.where(scale > 0, scale, 1.0)
    z = (x - mean) / scale
    projection = pca_projection(z, blocks)
    p = z @ projection
    p_mean, y_mean = p.mean(0), y.mean()
    pc = p - p_mean
    eye = torch.eye(pc.shape[1], dtype=pc.dtype, device=pc.device)
    weight = torch.linalg.solve(pc.T @ pc + alpha * eye, pc.T @ (y - y_mean))
    return {"mean": mean, "scale": scale, "projection": projection, "weight": weight, "bias": y_mean - p_mean @ weight}


def predict_probe(probe: dict[str, Tensor], x: Tensor, low: float = 0.0, high: float = 1.0) -> Tensor:
    """Predictions ``[N]`` for rows ``x``, clipped to ``[low, high]``."""
    z = (x.double() - probe["mean"]) / probe["scale"]
    return (z @ probe["projection"] @ probe["weight"] + probe["bias"]).clamp(low, high)
