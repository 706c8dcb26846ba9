"""POISE: a linear probe on the policy's own hidden states as a cross-rollout baseline."""
from __future__ import annotations

from typing import Any

import torch
from pydantic import Field, PrivateAttr
from torch import Tensor

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.advantages.linear_probe import fit_probe, predict_probe
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES
from polo.core.segment import masked_mean

_PROBE_KEYS = ("mean", "scale", "projection", "weight", "bias")


def pair_partner(group: Tensor) -> Tensor:
    """``partner[B]``: the other sample of each sample's group; raises unless every group has exactly 2."""
    _, inv, counts = torch.unique(group, return_inverse=True, return_counts=True)
    if (counts != 2).any():
        raise ValueError(
            "poise_probe needs exactly 2 rollouts per prompt (rollout.samples_per_prompt: 2); got group "
            f"sizes {sorted(set(counts.tolist()))}"
        )
    order = torch.sort(inv, stable=True).indices
    partner = torch.empty_like(order)
    partner[order[0::2]], partner[order[1::2]] = order[1::2], order[0::2]
    return partner


def last_tokens(mask: Tensor, k: int) -> Tensor:
    """The last ``k`` valid positions of each row of ``mask`` (any padding side), as a mask."""
    from_end = mask.flip(-1).cumsum(-1).flip(-1)
    return mask * (from_end <= k)


@ADVANTAGES.register("poise_probe")
class POISEProbe(AdvantageEstimator):
    """Two rollouts y¹, y² per prompt; features
    ``φ = [mean_{last k prompt tokens} h ; mean_{last k reasoning tokens} h ; u]`` with h = ``extras["hidden"]``
    (layer ``hidden_layer``) and u = (mean and population std of ``entropy_old`` over the reasoning span, mean
    over its last k tokens), k = ``pool_tokens``. The reasoning span is ``extras["reasoning_mask"]`` ``[B,T]``:
    the response tokens before the task's answer marker (all response tokens when the task has none), so the
    features describe the reasoning, not the answer that the reward scores.

    Probe g: standard scaler → PCA (``pca_prompt`` / ``pca_response`` dims per block, None: off) → ridge
    (α = ``ridge_alpha``, unpenalized intercept), predictions clipped to the range of the rewards it was fitted on
    (the paper's [0, 1] for a success reward; [0, 1.5] for the built-in task's ``correct`` + 0.5 ``digit_match``).
    Baselines: ``b¹ = g(φ²)``, ``b² = g(φ¹)``; ``A^i = R^i − b^i`` (no normalization). Each rollout's baseline
    comes from the other, independent rollout, so it does not depend on the rollout it is subtracted from and
    the gradient stays unbiased. Cold start (our choice): ``b^i = R^{j≠i}`` (RLOO, G = 2) until the probe is
    fitted on ≥ ``min_examples`` examples. ``after_update`` appends ``(φ¹, R²), (φ², R¹)`` to a FIFO buffer of
    ``buffer_size`` and refits; the step's advantages were fixed before. PAPER: read from the full text
    (its value-probe equations and training algorithm).
    """

    paper = ("Your Language Model is Its Own Critic: Reinforcement Learning with Value Estimation from Actor's "
             "Internal States (arXiv:2605.07579)")
    provenance = "PAPER"
    group_size = 2
    requires = frozenset({"hidden", "entropy_old", "reasoning_mask"})

    hidden_layer: int = -1
    pool_tokens: int = Field(default=10, gt=0)
    ridge_alpha: float = Field(default=0.01, ge=0)
    pca_prompt: int | None = Field(default=32, gt=0)
    pca_response: int | None = Field(default=256, gt=0)
    buffer_size: int = Field(default=4096, gt=0)
    min_examples: int = Field(default=256, gt=1)

    _x: Tensor | None = PrivateAttr(default=None)
    _y: Tensor | None = PrivateAttr(default=None)
    _probe: dict[str, Tensor] | None = PrivateAttr(default=None)

    def features(self, batch: RolloutBatch) -> Tensor:
        """``φ`` ``[B, 2d + 3]`` (float32); response statistics over the reasoning span only."""
        hidden = batch.extras["hidden"].float()
        tp = batch.prompt_mask.shape[1]
        prompt_last = last_tokens(batch.prompt_mask.float(), self.pool_tokens)
        span = batch.response_mask.float() * batch.extras["reasoning_mask"].float()
        span_last = last_tokens(span, self.pool_tokens)
        entropy = batch.extras["entropy_old"].float()
        ent_mean = masked_mean(entropy, span, dim=-1)
        ent_std = masked_mean((entropy - ent_mean[:, None]) ** 2, span, dim=-1).sqrt()
        return torch.cat([
            masked_mean(hidden[:, :tp], prompt_last[..., None], dim=1),
            masked_mean(hidden[:, tp:], span_last[..., None], dim=1),
            torch.stack([ent_mean, ent_std, masked_mean(entropy, span_last, dim=-1)], -1),
        ], -1)

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        mask = batch.mask
        reward = batch.scalar_reward().to(mask)
        partner = pair_partner(batch.group)
        if self._probe is None:
            baseline = reward[partner]
        else:
            baseline = predict_probe(self._probe, self.features(batch).cpu(), *self.reward_range()).to(mask)[partner]
        return AdvantageResult((reward - baseline)[:, None] * mask)

    def after_update(self, batch: RolloutBatch, context) -> dict[str, float]:
        x = self.features(batch).detach().cpu()
        y = batch.scalar_reward().detach().double().cpu()[pair_partner(batch.group).cpu()]
        self._x = x if self._x is None else torch.cat([self._x, x])[-self.buffer_size:]
        self._y = y if self._y is None else torch.cat([self._y, y])[-self.buffer_size:]
        metrics = {"poise/buffer": float(len(self._y))}
        if len(self._y) >= self.min_examples:
            d = (x.shape[1] - 3) // 2
            blocks = [(0, d, self.pca_prompt), (d, 2 * d, self.pca_response), (2 * d, 2 * d + 3, None)]
            self._probe = fit_probe(self._x, self._y, self.ridge_alpha, blocks)
            fitted = predict_probe(self._probe, self._x, *self.reward_range())
            metrics["poise/probe_mse"] = float(((fitted - self._y) ** 2).mean())
        return metrics

    def reward_range(self) -> tuple[float, float]:
        """``(min, max)`` of the rewards in the probe's buffer: its predictions are clipped to them."""
        return float(self._y.min()), float(self._y.max())

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {}
        if self._x is not None:
            state.update(buffer_x=self._x.clone(), buffer_y=self._y.clone())
        if self._probe is not None:
            state.update({f"probe_{k}": v.clone() for k, v in self._probe.items()})
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._x, self._y = state.get("buffer_x"), state.get("buffer_y")
        fitted = all(f"probe_{k}" in state for k in _PROBE_KEYS)
        self._probe = {k: state[f"probe_{k}"] for k in _PROBE_KEYS} if fitted else None
