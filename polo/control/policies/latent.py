"""A registration network whose top latent is a Gaussian policy (MorphSeek's head, docs/control.md).

Encoder: two stride-2 3×3 convolutions (LeakyReLU 0.2) from the (moving, fixed) image pair ``[B, 2, H, W]`` to
the top features ``[B, C, H/4, W/4]``; 1×1-conv heads give the latent's mean μ and log-std log σ
``[B, c_z, H/4, W/4]`` (N = c_z·H·W/16 entries). Decoder: two blocks of nearest ×2 upsampling, concatenation
with the skip (the first encoder features, then the input pair) and a 3×3 convolution, then a 3×3 convolution
to the displacement field ``[B, 2, H, W]`` in ``grid_sample``'s normalised units (initialised near zero: the
identity map). The action is the field decoded from ``z = μ + τ·σ⊙ε``; its log-probability is the LDVN
log-likelihood of z, which is detached (REINFORCE through μ and σ, not the reparameterisation trick).
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn

from polo.control.math.distributions import diag_gaussian_entropy
from polo.control.math.morphseek import LdvnScale, ldvn_divisor, ldvn_logp
from polo.control.policies.base import CONTROL_POLICIES, ActionScore, ControlPolicy, ControlPolicySettings


class LatentRegistrationNet(ControlPolicy):
    """``act(obs)``: obs the image pair (``[B, 2, H, W]`` or flattened), action the field decoded from a sampled
    latent, record ``z``; ``evaluate`` scores a stored ``z`` under the current μ, σ."""

    def __init__(self, height: int, width: int, channels: int, latent_channels: int, tau: float, scale: LdvnScale):
        super().__init__()
        self.height, self.width, self.tau, self.scale = height, width, tau, scale
        act = lambda: nn.LeakyReLU(0.2)  # noqa: E731
        self.enc1 = nn.Sequential(nn.Conv2d(2, channels, 3, 2, 1), act())
        self.enc2 = nn.Sequential(nn.Conv2d(channels, channels, 3, 2, 1), act())
        self.mean_head = nn.Conv2d(channels, latent_channels, 1)
        self.log_std_head = nn.Conv2d(channels, latent_channels, 1)
        self.dec1 = nn.Sequential(nn.Conv2d(latent_channels + channels, channels, 3, 1, 1), act())
        self.dec2 = nn.Sequential(nn.Conv2d(channels + 2, channels, 3, 1, 1), act())
        self.flow = nn.Conv2d(channels, 2, 3, 1, 1)
        nn.init.normal_(self.flow.weight, std=1e-5)
        nn.init.zeros_(self.flow.bias)
        nn.init.zeros_(self.log_std_head.weight)
        nn.init.zeros_(self.log_std_head.bias)

    @property
    def latent_size(self) -> int:
        """N: the number of latent entries of one pair."""
        return self.mean_head.out_channels * (self.height // 4) * (self.width // 4)

    def encode(self, pair: Tensor) -> tuple[tuple[Tensor, Tensor], Tensor, Tensor]:
        """``pair`` ``[B, 2, H, W]`` → the skips (input pair, first features), μ and log σ ``[B, c_z, H/4, W/4]``."""
        f1 = self.enc1(pair)
        top = self.enc2(f1)
        return (pair, f1), self.mean_head(top), self.log_std_head(top)

    def decode(self, skips: tuple[Tensor, Tensor], z: Tensor) -> Tensor:
        """Latents ``z`` ``[B, c_z, h, w]`` (with the skips of the same B pairs) → fields ``[B, 2, H, W]``."""
        pair, f1 = skips
        x = self.dec1(torch.cat([F.interpolate(z, scale_factor=2.0, mode="nearest"), f1], 1))
        x = self.dec2(torch.cat([F.interpolate(x, scale_factor=2.0, mode="nearest"), pair], 1))
        return self.flow(x)

    def sample(self, mean: Tensor, log_std: Tensor, samples: int, generator: torch.Generator | None) -> Tensor:
        """``samples`` latents per pair, ``z = μ + τ·σ⊙ε`` with ε ~ N(0, I) from ``generator``, detached;
        ``[samples, B, c_z, h, w]``."""
        eps = torch.randn((samples, *mean.shape), generator=generator, dtype=mean.dtype, device=mean.device)
        return (mean + self.tau * log_std.exp() * eps).detach()

    def log_prob(self, z: Tensor, mean: Tensor, log_std: Tensor) -> Tensor:
        """LDVN log-likelihood of ``z`` ``[B, ...]`` (or ``[J, B, ...]``) → ``[B]`` (or ``[J, B]``)."""
        lead = z.shape[:-3]
        z, mean, log_std = (torch.broadcast_to(x, z.shape).reshape(-1, *z.shape[-3:]) for x in (z, mean, log_std))
        return ldvn_logp(z, mean, log_std, self.tau, self.scale).view(lead)

    def _pair(self, obs: Tensor) -> Tensor:
        return obs.reshape(obs.shape[0], 2, self.height, self.width)

    def act(self, obs: Tensor, generator: torch.Generator | None = None, deterministic: bool = False
            ) -> dict[str, Tensor]:
        skips, mean, log_std = self.encode(self._pair(obs))
        z = mean.detach() if deterministic else self.sample(mean, log_std, 1, generator)[0]
        return {"action": self.decode(skips, z), "z": z, "logp": self.log_prob(z, mean, log_std)}

    def evaluate(self, obs: Tensor, record: dict[str, Tensor]) -> ActionScore:
        _, mean, log_std = self.encode(self._pair(obs))
        entropy = diag_gaussian_entropy(log_std.flatten(1) + math.log(self.tau)) / ldvn_divisor(self.latent_size,
                                                                                                 self.scale)
        return ActionScore(self.log_prob(record["z"], mean, log_std), entropy,
                           metrics={"policy/sigma": float(log_std.detach().exp().mean())})


@CONTROL_POLICIES.register("latent")
class LatentPolicySettings(ControlPolicySettings):
    """MorphSeek's latent Gaussian registration policy over an image-pair observation (2·H·W values) and a
    displacement-field action ``Box(2, H, W)``, H and W multiples of 4."""

    paper = ("MorphSeek: Fine-grained Latent Representation-Level Policy Optimization for Deformable Image "
             "Registration (arXiv:2511.17392)")
    provenance = "RECONSTRUCTED"

    channels: int = Field(16, ge=1)
    """Feature channels of every convolution."""
    latent_channels: int = Field(8, ge=1)
    """c_z: channels of the latent (N = c_z·H·W/16)."""
    tau: float = Field(1.0, gt=0)
    """Sampling temperature: z = μ + τ·σ⊙ε."""
    ldvn_scale: LdvnScale = "sqrt_n"
    """s of the LDVN log-likelihood: one (plain log-density), sqrt_n (MorphSeek's choice) or n."""

    def build_for(self, height: int, width: int) -> LatentRegistrationNet:
        if height % 4 or width % 4 or height < 4 or width < 4:
            raise ValueError(f"policy latent needs image sides that are multiples of 4, got {height}×{width}")
        return LatentRegistrationNet(height, width, self.channels, self.latent_channels, self.tau, self.ldvn_scale)

    def build(self, observation_space: Any, action_space: Any) -> ControlPolicy:
        shape = tuple(getattr(action_space, "shape", None) or ())
        if len(shape) != 3 or shape[0] != 2:
            raise ValueError(f"policy latent needs a displacement-field action space Box(2, H, W), got {action_space}")
        obs = math.prod(getattr(observation_space, "shape", None) or (0,))
        if obs != 2 * shape[1] * shape[2]:
            raise ValueError(f"policy latent needs an image-pair observation of 2·{shape[1]}·{shape[2]} values, got "
                             f"{observation_space}")
        return self.build_for(shape[1], shape[2])
