"""CoRT: token weights from how much more likely each token became because of the rubric in the prompt."""
from __future__ import annotations

from typing import Any

import torch
from pydantic import Field, field_validator, model_validator
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.credit.base import TokenCredit
from polo.core.registry import CREDIT
from polo.core.segment import masked_mean
from polo.core.templates import check_template

RUBRIC_TEMPLATE = "Grading criteria:\n{rubric}\n\n{prompt}"


def smoothstep(step: float, start: float, end: float) -> float:
    """``s = 3u² − 2u³`` with ``u = clip((step − start)/(end − start), 0, 1)`` (a step at ``start`` when
    ``end == start``)."""
    u = float(step >= start) if end == start else min(max((step - start) / (end - start), 0.0), 1.0)
    return 3 * u**2 - 2 * u**3


@CREDIT.register("cort")
class CoRT(TokenCredit):
    """With the contrast ``c = log π_old(y_t | x with rubric, y_<t) − log π_old(y_t | x, y_<t)``
    (``rubric_contrast``, the behaviour policy re-reading the response with the example's ``rubric`` column
    in its prompt, ``rubric_template``):

    * bounded weight ``w̃ = 1 + λ·tanh(c/τ)`` ∈ [1 − λ, 1 + λ];
    * per response mean 1: ``w = w̃ / (Σ_t mask·w̃ / Σ_t mask)``, so ``Σ_t A·w = L·A`` (the response's
      total advantage is kept);
    * SmoothStep warm-up over completed training steps k: ``w_eff = 1 + s(k)·(w − 1)``,
      ``s = 3u² − 2u³``, ``u = clip((k − k_0)/(k_1 − k_0), 0, 1)``.

    The advantages are multiplied by ``w_eff``: tokens the rubric made likelier get more of the response's
    credit. The step counter is the component's state (``after_update``), checkpointed with the run. The tanh
    mapping and the defaults of λ, τ, k_0, k_1 are our reconstruction (the paper's exact mapping was not
    available); the per-response normalisation and the SmoothStep shape follow its abstract and public summaries.
    The paper samples under the rubric-conditioned prompt and replays under a criteria-free one; here the response
    is sampled under the task's own prompt and replayed with the rubric added: the same contrast, taken at the
    criteria-free prompt's responses.
    """

    paper = "CoRT: Counterfactual Replay for Token-Level Rubric-Guided Policy Optimization (arXiv:2607.25659)"
    provenance = "RECONSTRUCTED"
    requires = frozenset({"rubric_contrast"})

    bound: float = Field(0.5, ge=0, lt=1)
    """λ: the weights before normalisation lie in [1 − λ, 1 + λ]."""
    temperature: float = Field(1.0, gt=0)
    """τ: the contrast (nats) is read as tanh(c/τ)."""
    warmup_start: int = Field(0, ge=0)
    """k_0: the completed step at which the weights start to turn on."""
    warmup_end: int = Field(50, ge=0)
    """k_1: the completed step from which the weights act fully (the paper gives the schedule's shape, not its length;
    50 is the first sixth of a default 300-step run, so a run of a few steps applies only a few % of the weights)."""
    rubric_template: str = RUBRIC_TEMPLATE
    """The rubric-conditioned prompt (``{rubric}``: the example's ``rubric`` column, ``{prompt}``: its prompt; with a
    chat template, the content of its last message). The criteria-free prompt is the example's own."""
    default_rubric: str | None = None
    """Criteria for examples without a ``rubric`` column (one rubric for the whole task); None: such an example
    is an error."""

    _step: int = 0

    @field_validator("rubric_template")
    @classmethod
    def _template(cls, value: str) -> str:
        return check_template(value, ("rubric", "prompt"))

    @model_validator(mode="after")
    def _ordered(self) -> "CoRT":
        if self.warmup_end < self.warmup_start:
            raise ValueError(f"warmup_end={self.warmup_end} is before warmup_start={self.warmup_start}")
        return self

    def target(self, batch: RolloutBatch) -> Tensor:
        """``w``: the bounded, response-normalised weights the warm-up turns on (``[B,T]``, values off the mask
        are not used)."""
        mask = batch.mask
        raw = 1 + self.bound * torch.tanh(batch.input("rubric_contrast").to(mask) / self.temperature)
        # the mean of w̃ is at least 1 − λ; the floor only keeps a row without valid tokens finite
        return raw / masked_mean(raw, mask, dim=-1).clamp_min(1 - self.bound)[:, None]

    def __call__(self, batch: RolloutBatch) -> Tensor:
        w = self.target(batch)
        return (1 + smoothstep(self._step, self.warmup_start, self.warmup_end) * (w - 1)) * batch.mask

    def diagnostics(self, batch: RolloutBatch, weights: Tensor) -> dict[str, float]:
        """The base statistics, plus how far the weights move the advantages: ``cort/spread``, the mean of
        ``|w_eff − 1|`` over the trained tokens (what this step applies), and ``cort/target_spread``, the mean of
        ``|w − 1|`` (what it applies once warmed up; ``cort/spread = s·cort/target_spread`` with the step's SmoothStep
        share s, of the steps completed before it)."""
        m = batch.mask.bool()
        if not m.any():
            return {}
        return {**super().diagnostics(batch, weights), "cort/spread": float((weights[m] - 1).abs().mean()),
                "cort/target_spread": float((self.target(batch)[m] - 1).abs().mean())}

    def after_update(self, batch, context) -> dict[str, float]:
        self._step = context.step
        return {"cort/warmup": smoothstep(self._step, self.warmup_start, self.warmup_end)}

    def state_dict(self) -> dict[str, Any]:
        return {"step": self._step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._step = int(state["step"])
