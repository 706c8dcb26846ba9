"""ToyReg2D: synthetic 2-D registration pairs for MorphSeek's demo (docs/control.md), generated in torch.

A pair shows a large ellipse (intensity 1) with a small, low-contrast disc inside (intensity 0.85), blurred.
The moving image shifts the whole ellipse by a global offset g and the disc by a further independent offset
e; the label is the disc alone. Aligning the intensities mostly undoes g, so the label needs the weak
supervision that MorphSeek's reward gives. The gymnasium environment around it is ``toyreg2d_env``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

ELLIPSE_AXES = (0.55, 0.7)
"""Range of the ellipse's semi-axes (normalised units: the image spans [−1, 1])."""
ELLIPSE_CENTRE = 0.1
"""The ellipse's centre is uniform in [−0.1, 0.1]² in the fixed image."""
DISC_RADIUS = (0.2, 0.26)
DISC_OFFSET = 0.12
"""The disc's centre is the ellipse's plus a uniform offset in [−0.12, 0.12]² in the fixed image."""
DISC_INTENSITY = 0.85
GLOBAL_SHIFT = 0.2
"""The moving image's ellipse and disc move by g, uniform in [−0.2, 0.2]²."""
DISC_SHIFT = 0.15
"""The moving image's disc moves by a further e, uniform in [−0.15, 0.15]²."""
BLUR_SIGMA = 1.0
"""Gaussian blur of the images, in pixels (the labels stay sharp)."""


@dataclass
class RegistrationPairs:
    """``n`` pairs, each ``[n, 1, H, W]`` float32: images in [0, 1] and binary labels (the disc)."""

    moving: Tensor
    fixed: Tensor
    moving_label: Tensor
    fixed_label: Tensor

    def __len__(self) -> int:
        return self.moving.shape[0]

    def take(self, index: Tensor) -> "RegistrationPairs":
        return RegistrationPairs(self.moving[index], self.fixed[index], self.moving_label[index],
                                 self.fixed_label[index])


def _uniform(generator: torch.Generator, shape: tuple[int, ...], low: float, high: float) -> Tensor:
    return low + (high - low) * torch.rand(shape, generator=generator)


def _gaussian_blur(images: Tensor, sigma: float) -> Tensor:
    radius = max(1, int(round(3 * sigma)))
    x = torch.arange(-radius, radius + 1, dtype=images.dtype)
    k = torch.exp(-0.5 * (x / sigma) ** 2)
    k = k / k.sum()
    out = F.conv2d(F.pad(images, (radius, radius, 0, 0), mode="replicate"), k.view(1, 1, 1, -1))
    return F.conv2d(F.pad(out, (0, 0, radius, radius), mode="replicate"), k.view(1, 1, -1, 1))


def _render(grid: Tensor, centre: Tensor, axes: Tensor, angle: Tensor, disc_centre: Tensor, radius: Tensor
            ) -> tuple[Tensor, Tensor]:
    """Images (before blur) and disc labels ``[n, 1, H, W]`` of n scenes; ``grid`` ``[H, W, 2]`` (x, y)."""
    d = grid[None] - centre[:, None, None, :]                      # [n, H, W, 2]
    cos, sin = torch.cos(angle)[:, None, None], torch.sin(angle)[:, None, None]
    u = d[..., 0] * cos + d[..., 1] * sin
    v = -d[..., 0] * sin + d[..., 1] * cos
    ellipse = (u / axes[:, 0, None, None]) ** 2 + (v / axes[:, 1, None, None]) ** 2 <= 1
    disc = ((grid[None] - disc_centre[:, None, None, :]) ** 2).sum(-1) <= radius[:, None, None] ** 2
    image = torch.where(disc, DISC_INTENSITY, ellipse.float())
    return image[:, None], disc[:, None].float()


def toyreg2d_pairs(n: int, generator: torch.Generator, size: int = 32) -> RegistrationPairs:
    """``n`` random pairs of ``size × size`` images drawn with ``generator`` (all pairs at once)."""
    if n < 1 or size < 4:
        raise ValueError(f"toyreg2d_pairs needs n >= 1 and size >= 4, got n={n}, size={size}")
    centre = _uniform(generator, (n, 2), -ELLIPSE_CENTRE, ELLIPSE_CENTRE)
    axes = _uniform(generator, (n, 2), *ELLIPSE_AXES)
    angle = _uniform(generator, (n,), 0.0, torch.pi)
    radius = _uniform(generator, (n,), *DISC_RADIUS)
    disc = centre + _uniform(generator, (n, 2), -DISC_OFFSET, DISC_OFFSET)
    g = _uniform(generator, (n, 2), -GLOBAL_SHIFT, GLOBAL_SHIFT)
    e = _uniform(generator, (n, 2), -DISC_SHIFT, DISC_SHIFT)
    lin = torch.linspace(-1, 1, size)
    grid = torch.stack(torch.meshgrid(lin, lin, indexing="xy"), -1)  # [H, W, 2]: (x, y)
    fixed, fixed_label = _render(grid, centre, axes, angle, disc, radius)
    moving, moving_label = _render(grid, centre + g, axes, angle, disc + g + e, radius)
    return RegistrationPairs(_gaussian_blur(moving, BLUR_SIGMA), _gaussian_blur(fixed, BLUR_SIGMA),
                             moving_label, fixed_label)


def toyreg2d_dataset(seed: int, train: int = 512, test: int = 128, size: int = 32
                     ) -> tuple[RegistrationPairs, RegistrationPairs]:
    """The training and test pairs of one seed (the same seed gives the same pairs)."""
    generator = torch.Generator().manual_seed(seed)
    return toyreg2d_pairs(train, generator, size), toyreg2d_pairs(test, generator, size)
