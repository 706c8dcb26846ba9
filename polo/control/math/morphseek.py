"""MorphSeek's tensor math: the latent Gaussian policy's scaled log-likelihood, the registration rewards and
losses, and warping / composing dense displacement fields.

MorphSeek: Fine-grained Latent Representation-Level Policy Optimization for Deformable Image Registration
(arXiv:2511.17392). Conventions: images and label maps are ``[B, C, H, W]``; a displacement field ``u`` is
``[B, 2, H, W]`` in the normalised coordinates of ``grid_sample`` (``align_corners=True``: −1 and 1 are the
centres of the border pixels), channel 0 the x (width) and channel 1 the y (height) displacement; warping
samples ``I∘(id + u)``, i.e. ``warped(x) = I(x + u(x))``.
"""
from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from polo.control.math.distributions import diag_gaussian_logp
from polo.core.advantages.group import GRPO

LdvnScale = Literal["one", "sqrt_n", "n"]


def ldvn_logp(z: Tensor, mean: Tensor, log_std: Tensor, tau: float = 1.0, scale: LdvnScale = "sqrt_n") -> Tensor:
    """Latent-dimension variance normalised log-likelihood of latents ``z`` under ``N(μ, τ²·diag σ²)``:
    ``log π̃ = (1/s)·Σ_i log N(z_i; μ_i, τσ_i) = −(1/2s)·Σ_i [((z_i − μ_i)/(τσ_i))² + log(2π τ² σ_i²)]``
    summed over every dim after the first (the N latent entries of a sample), ``s`` = 1, √N or N (``scale``).
    Dividing by √N keeps the policy gradient's scale from growing with the latent size. Returns ``[B]``."""
    if tau <= 0:
        raise ValueError(f"ldvn_logp needs a sampling temperature tau > 0, got {tau}")
    flat = lambda x: x.reshape(x.shape[0], -1)  # noqa: E731
    return diag_gaussian_logp(flat(z), flat(mean), flat(log_std) + math.log(tau)) / ldvn_divisor(mean[0].numel(), scale)


def ldvn_divisor(n: int, scale: LdvnScale) -> float:
    """LDVN's ``s`` for a latent of ``n`` entries: 1, √n or n."""
    if scale not in ("one", "sqrt_n", "n"):
        raise ValueError(f"LDVN scale must be one of one, sqrt_n, n; got {scale!r}")
    return {"one": 1.0, "sqrt_n": math.sqrt(n), "n": float(n)}[scale]


def gaussian_kl(mean: Tensor, log_std: Tensor) -> Tensor:
    """``KL(N(μ, σ²) ‖ N(0, I)) = ½ Σ (μ² + σ² − 1 − log σ²)`` over every dim after the first; ``[B]``."""
    kl = 0.5 * (mean ** 2 + torch.exp(2 * log_std) - 1 - 2 * log_std)
    return kl.reshape(kl.shape[0], -1).sum(-1)


def hard_dice(a: Tensor, b: Tensor) -> Tensor:
    """Dice overlap ``2|A∩B| / (|A| + |B|)`` of binary label maps (any value > 0.5 is inside), over every dim
    after the first; two empty maps overlap perfectly (1). ``[B]``."""
    a = (a > 0.5).reshape(a.shape[0], -1).float()
    b = (b > 0.5).reshape(b.shape[0], -1).float()
    total = a.sum(-1) + b.sum(-1)
    return torch.where(total > 0, 2 * (a * b).sum(-1) / total.clamp_min(1), torch.ones_like(total))


def soft_dice_loss(pred: Tensor, target: Tensor, eps: float = 1e-6) -> Tensor:
    """``1 − (2 Σ p·t + ε) / (Σ p + Σ t + ε)`` of soft label maps in [0, 1] over every dim after the first; ``[B]``."""
    p, t = pred.reshape(pred.shape[0], -1), target.reshape(target.shape[0], -1)
    return 1 - (2 * (p * t).sum(-1) + eps) / (p.sum(-1) + t.sum(-1) + eps)


def smoothness(field: Tensor) -> Tensor:
    """Diffusion regulariser ``‖∇u‖²``: the mean squared forward difference of the field along y plus that
    along x (VoxelMorph's ``Grad('l2')``, in the field's own units); ``[B]``."""
    dy = (field[:, :, 1:, :] - field[:, :, :-1, :]) ** 2
    dx = (field[:, :, :, 1:] - field[:, :, :, :-1]) ** 2
    return dy.flatten(1).mean(-1) + dx.flatten(1).mean(-1)


def to_pixels(field: Tensor) -> Tensor:
    """A normalised field ``[B, 2, H, W]`` (``align_corners=True``) in pixel units: ×(W−1)/2 for x, ×(H−1)/2 for y."""
    h, w = field.shape[-2:]
    return field * field.new_tensor([(w - 1) / 2, (h - 1) / 2]).view(1, 2, 1, 1)


def jacobian_det_2d(field_px: Tensor) -> Tensor:
    """Jacobian determinant of ``x ↦ x + u(x)`` for a pixel-unit field ``[B, 2, H, W]`` by forward differences:
    ``J = (1 + ∂u_x/∂x)(1 + ∂u_y/∂y) − (∂u_x/∂y)(∂u_y/∂x)`` on the ``[B, H−1, W−1]`` pixels that have both a
    right and a lower neighbour."""
    if field_px.dim() != 4 or field_px.shape[1] != 2:
        raise ValueError(f"jacobian_det_2d expects a field [B, 2, H, W], got shape {tuple(field_px.shape)}")
    dx = field_px[:, :, :-1, 1:] - field_px[:, :, :-1, :-1]   # ∂u/∂x  (channels: u_x, u_y)
    dy = field_px[:, :, 1:, :-1] - field_px[:, :, :-1, :-1]   # ∂u/∂y
    return (1 + dx[:, 0]) * (1 + dy[:, 1]) - dy[:, 0] * dx[:, 1]


def folding_fraction(field_px: Tensor) -> Tensor:
    """NJD: the fraction of pixels whose Jacobian determinant is ≤ 0 (the map folds there); ``[B]``."""
    return (jacobian_det_2d(field_px) <= 0).flatten(1).float().mean(-1)


def registration_reward(dice_new: Tensor, dice_old: Tensor, njd: Tensor, w_dice: float = 1.0,
                        w_njd: float = -1.0) -> Tensor:
    """``R = w_Dice·(Dice_new − Dice_old) + w_NJD·NJD`` (``w_NJD < 0`` penalises folding)."""
    return w_dice * (dice_new - dice_old) + w_njd * njd


def group_advantages(reward: Tensor, eps: float = 1e-6) -> Tensor:
    """GRPO's group z-score over the J candidates of each pair: ``reward`` ``[J, B]`` → ``(R − mean_j R) /
    (std_j R + ε)`` ``[J, B]`` (unbiased std), column b being one group."""
    j, b = reward.shape
    group = torch.arange(b, device=reward.device).repeat(j)
    return GRPO(eps=eps).sequence_advantage(reward.reshape(-1), group).view(j, b)


def identity_grid(batch: int, height: int, width: int, like: Tensor) -> Tensor:
    """``[B, H, W, 2]`` the (x, y) normalised coordinates of every pixel centre (``align_corners=True``)."""
    theta = like.new_tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]).expand(batch, 2, 3)
    return F.affine_grid(theta, [batch, 1, height, width], align_corners=True)


def warp(image: Tensor, field: Tensor, mode: str = "bilinear") -> Tensor:
    """``image∘(id + u)``: ``image`` ``[B, C, H, W]`` sampled at ``x + u(x)`` (border padding)."""
    b, _, h, w = field.shape
    grid = identity_grid(b, h, w, field) + field.permute(0, 2, 3, 1)
    return F.grid_sample(image, grid, mode=mode, padding_mode="border", align_corners=True)


def compose(outer: Tensor, inner: Tensor) -> Tensor:
    """The displacement of ``(id + outer)∘(id + inner)``: ``inner + outer∘(id + inner)``. Warping by it equals
    warping by ``outer`` first and then by ``inner`` (a refinement ``inner`` predicted on the image that
    ``outer`` already warped): ``warp(I, compose(U, u)) ≈ warp(warp(I, U), u)``."""
    return inner + warp(outer, inner)
