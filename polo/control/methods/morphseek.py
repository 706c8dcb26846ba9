"""``method: morphseek``: a registration network with a latent Gaussian policy head, warmed up without labels and
then trained by group-relative policy gradients on the label Dice (docs/control.md).

Iterations 1..``warmup_iterations`` are the unsupervised warm-up, the rest are GRPO iterations. Each iteration
runs ``refine_steps`` (T) greedy refinement steps on a batch of ToyReg2D training pairs, the running field U
starting at the identity; at each step the network sees the moving image warped by U and the fixed image.

* Warm-up (τ = 0, z = μ): ``L_warm = MSE(I_m∘Φ, I_f) + λ_reg·‖∇φ‖² + β·KL(N(μ, σ²) ‖ N(0, I))`` with
  ``Φ = U∘φ`` (``compose``), averaged over the T steps; U then follows φ(μ).
* GRPO: J latents ``z = μ + τσ⊙ε`` per pair, decoded into candidates ``φ_j``, scored by
  ``R_j = w_Dice·(Dice(S_m∘Φ_j, S_f) − Dice(S_m∘U, S_f)) + w_NJD·NJD(Φ_j)`` (hard Dice, folding fraction),
  z-scored within the J candidates of each pair (GRPO's group statistics). The loss of a step is
  ``−mean_{j,b} A_j·log π̃(z_j) + λ_warm·L_warm(z = μ) + λ_Dice·(1 − softDice(S_m∘Φ_μ, S_f))`` with the LDVN
  log-likelihood ``log π̃`` (z detached: REINFORCE); U then follows the best candidate. One Adam step per
  iteration on the loss averaged over the T steps (a fresh Adam at ``lr`` when GRPO starts).

Evaluation: the test pairs registered by T greedy steps with z = μ, their hard label Dice → ``eval/dice``.
"""
from __future__ import annotations

from typing import Any, Callable, ClassVar

import torch
from pydantic import Field, model_validator

from polo.control.envs.toyreg2d import RegistrationPairs, toyreg2d_dataset
from polo.control.math.morphseek import (compose, folding_fraction, gaussian_kl, group_advantages, hard_dice,
                                         registration_reward, smoothness, soft_dice_loss, to_pixels, warp)
from polo.control.methods.base import CONTROL_METHODS, ControlMethod
from polo.control.policies.base import CONTROL_POLICIES
from polo.control.policies.latent import LatentPolicySettings, LatentRegistrationNet


@CONTROL_METHODS.register("morphseek")
class MorphSeek(ControlMethod):
    """MorphSeek on ToyReg2D; ``iterations`` counts the warm-up and the GRPO iterations together."""

    paper = ("MorphSeek: Fine-grained Latent Representation-Level Policy Optimization for Deformable Image "
             "Registration (arXiv:2511.17392)")
    provenance = "SECONDARY"

    headline: ClassVar[str] = "eval/dice"
    panels: ClassVar[tuple[tuple[str, str], ...]] = (
        ("eval/dice", "test label Dice (hard, greedy μ)"), ("train/dice", "training label Dice after T steps"),
        ("train/reward", "GRPO reward (all candidates)"), ("loss/policy", "policy term"),
        ("loss/warm", "warm-up objective"), ("policy/sigma", "latent σ"))

    iterations: int = Field(1000, ge=1)
    """Warm-up plus GRPO iterations."""
    eval_every: int = Field(50, ge=1)
    checkpoint_every: int = Field(50, ge=1)
    policy: dict[str, Any] = Field(default_factory=lambda: {"name": "latent"})
    """The registration network: a ``latent`` control policy (channels, latent_channels, tau, ldvn_scale)."""
    image_size: int = Field(32, ge=4)
    train_pairs: int = Field(512, ge=1)
    test_pairs: int = Field(128, ge=1)
    data_seed: int | None = None
    """Seed of the ToyReg2D pairs; None: the run's seed."""
    refine_steps: int = Field(2, ge=1)
    """T: greedy refinement steps per pair (training and evaluation)."""
    warmup_iterations: int = Field(400, ge=0)
    warmup_batch: int = Field(32, ge=1)
    warmup_lr: float = Field(1e-3, gt=0)
    batch: int = Field(8, ge=1)
    """Pairs per GRPO iteration."""
    latent_samples: int = Field(6, ge=2)
    """J: latent samples per pair and refinement step."""
    lr: float = Field(1e-4, gt=0)
    """Adam learning rate of the GRPO stage."""
    lambda_reg: float = Field(1.0, ge=0)
    """Weight of the smoothness ‖∇φ‖² in L_warm."""
    beta_kl: float = Field(1e-3, ge=0)
    """Weight of the latent KL in L_warm (summed over the latent, averaged over pairs)."""
    policy_term: bool = True
    """Include the policy-gradient term (false: the ablation with the supervised terms alone)."""
    lambda_warm: float = Field(1.0, ge=0)
    """Weight of L_warm(z = μ) in the GRPO loss."""
    lambda_dice: float = Field(1.0, ge=0)
    """Weight of the soft-Dice loss in the GRPO loss (0: the ablation without it)."""
    w_dice: float = 1.0
    """Reward weight of the hard-Dice gain."""
    w_njd: float = Field(-1.0, le=0)
    """Reward weight of the folding fraction NJD (≤ 0: a penalty)."""
    adv_eps: float = Field(1e-6, gt=0)
    """ε of the group z-score."""

    @model_validator(mode="after")
    def _latent_policy(self):
        if not isinstance(CONTROL_POLICIES.build(self.policy, "policy"), LatentPolicySettings):
            raise ValueError(f"method morphseek needs policy latent, got policy {self.policy.get('name')!r}")
        if self.image_size % 4:
            raise ValueError(f"image_size must be a multiple of 4 (two stride-2 convolutions), got {self.image_size}")
        if not self.policy_term and self.lambda_warm == 0 and self.lambda_dice == 0:
            raise ValueError("policy_term false with lambda_warm = lambda_dice = 0 leaves no GRPO loss")
        return self

    # ------------------------------------------------------------------ setup
    def setup(self, seed: int, log: Callable[[str], Any]) -> None:
        self._train, self._test = toyreg2d_dataset(seed if self.data_seed is None else self.data_seed,
                                                   self.train_pairs, self.test_pairs, self.image_size)
        settings = CONTROL_POLICIES.build(self.policy, "policy")
        self._net: LatentRegistrationNet = settings.build_for(self.image_size, self.image_size)
        self._optimizer = torch.optim.Adam(self._net.parameters(), lr=self.warmup_lr)
        self._generator = torch.Generator().manual_seed(seed)

    # ------------------------------------------------------------------ one iteration
    def iterate(self, iteration: int) -> dict[str, float]:
        warmup = iteration <= self.warmup_iterations
        if iteration == self.warmup_iterations + 1:
            self._optimizer = torch.optim.Adam(self._net.parameters(), lr=self.lr)
        size = self.warmup_batch if warmup else self.batch
        pairs = self._train.take(torch.randint(len(self._train), (size,), generator=self._generator))
        self._net.train()
        sums: dict[str, float] = {}
        loss = 0.0
        field = torch.zeros_like(pairs.moving).expand(-1, 2, -1, -1)
        for _ in range(self.refine_steps):
            step_loss, field, stats = (self.warmup_step if warmup else self.grpo_step)(pairs, field)
            loss = loss + step_loss / self.refine_steps
            for k, v in stats.items():
                sums[k] = sums.get(k, 0.0) + v / self.refine_steps
        self._optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self._optimizer.step()
        with torch.no_grad():
            dice = hard_dice(warp(pairs.moving_label, field), pairs.fixed_label)
        return {**sums, "loss/total": float(loss.detach()), "train/dice": float(dice.mean()),
                "train/phase": 0.0 if warmup else 1.0, "optim/lr": self._optimizer.param_groups[0]["lr"]}

    def _mean_terms(self, pairs: RegistrationPairs, field: torch.Tensor):
        """The network on the pairs warped by ``field``; the field φ(μ) composed onto it, L_warm ``[B]`` and its
        parts, and the network's (skips, μ, log σ)."""
        skips, mean, log_std = self._net.encode(torch.cat([warp(pairs.moving, field), pairs.fixed], 1))
        phi = self._net.decode(skips, mean)
        total = compose(field, phi)
        sim = ((warp(pairs.moving, total) - pairs.fixed) ** 2).flatten(1).mean(-1)
        smooth, kl = smoothness(phi), gaussian_kl(mean, log_std)
        warm = sim + self.lambda_reg * smooth + self.beta_kl * kl
        stats = {"loss/warm": float(warm.detach().mean()), "loss/similarity": float(sim.detach().mean()),
                 "loss/smoothness": float(smooth.detach().mean()), "loss/kl": float(kl.detach().mean()),
                 "policy/sigma": float(log_std.detach().exp().mean()),
                 "policy/mu_abs": float(mean.detach().abs().mean())}
        return total, warm, stats, (skips, mean, log_std)

    def warmup_step(self, pairs: RegistrationPairs, field: torch.Tensor):
        """One warm-up refinement step: (loss, the next field, metrics)."""
        total, warm, stats, _ = self._mean_terms(pairs, field)
        return warm.mean(), total.detach(), stats

    def grpo_step(self, pairs: RegistrationPairs, field: torch.Tensor):
        """One GRPO refinement step: (loss, the best candidate's field, metrics)."""
        total, warm, stats, (skips, mean, log_std) = self._mean_terms(pairs, field)
        soft = soft_dice_loss(warp(pairs.moving_label, total), pairs.fixed_label)
        z = self._net.sample(mean, log_std, self.latent_samples, self._generator)          # [J, B, c_z, h, w]
        j, b = z.shape[:2]
        with torch.no_grad():
            rep = lambda x: x.detach().repeat(j, *([1] * (x.dim() - 1)))  # noqa: E731  [J·B, ...], j-major
            phi = self._net.decode(tuple(rep(s) for s in skips), z.flatten(0, 1))
            candidates = compose(rep(field), phi)
            dice_new = hard_dice(warp(rep(pairs.moving_label), candidates), rep(pairs.fixed_label)).view(j, b)
            dice_old = hard_dice(warp(pairs.moving_label, field), pairs.fixed_label)
            njd = folding_fraction(to_pixels(candidates)).view(j, b)
            reward = registration_reward(dice_new, dice_old, njd, self.w_dice, self.w_njd)
            adv = group_advantages(reward, self.adv_eps)
            best = candidates.view(j, b, *candidates.shape[1:])[reward.argmax(0), torch.arange(b)]
        policy = -(adv * self._net.log_prob(z, mean, log_std)).mean()
        loss = self.lambda_warm * warm.mean() + self.lambda_dice * soft.mean()
        if self.policy_term:
            loss = loss + policy
        stats.update({"loss/policy": float(policy.detach()), "loss/soft_dice": float(soft.detach().mean()),
                      "train/reward": float(reward.mean()), "train/reward_best": float(reward.max(0).values.mean()),
                      "train/njd": float(njd.mean())})
        return loss, best, stats

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Hard label Dice of the test pairs after T greedy steps with z = μ; the folding fraction of their
        fields; the Dice before registration."""
        self._net.eval()
        pairs = self._test
        field = torch.zeros_like(pairs.moving).expand(-1, 2, -1, -1)
        for _ in range(self.refine_steps):
            skips, mean, _ = self._net.encode(torch.cat([warp(pairs.moving, field), pairs.fixed], 1))
            field = compose(field, self._net.decode(skips, mean))
        dice = hard_dice(warp(pairs.moving_label, field), pairs.fixed_label)
        return {"eval/dice": float(dice.mean()), "eval/dice_min": float(dice.min()),
                "eval/njd": float(folding_fraction(to_pixels(field)).mean()),
                "eval/dice_unregistered": float(hard_dice(pairs.moving_label, pairs.fixed_label).mean())}

    # ------------------------------------------------------------------ state
    def weights(self) -> dict[str, dict[str, torch.Tensor]]:
        return {"policy": self._net.state_dict()}

    def load_weights(self, weights: dict[str, dict[str, torch.Tensor]]) -> None:
        self._net.load_state_dict(weights["policy"])

    def training_state(self) -> dict[str, Any]:
        return {"optimizer": self._optimizer.state_dict(), "generator": self._generator.get_state()}

    def load_training_state(self, state: dict[str, Any]) -> None:
        self._optimizer.load_state_dict(state["optimizer"])
        self._generator.set_state(state["generator"])
