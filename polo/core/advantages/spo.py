"""SPO: one response per prompt, a persistent per-prompt Beta tracker as baseline."""
from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import Field, PrivateAttr, model_validator
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES
from polo.core.segment import group_stats, masked_mean, segment_sum

_STORED = ("prompt_ids", "response_ids", "response_mask", "logp")


@ADVANTAGES.register("spo_tracker")
class SPOTracker(AdvantageEstimator):
    """Per prompt x (``extras["prompt_index"]``) a Beta(α_x, β_x) tracker of its success probability,
    ``p̂_x = α_x/(α_x+β_x)``; α0 = β0 = ``prior`` for a prompt the tracker has no evidence on.

    ``before_training`` (unless ``offline_init: false``): before step 1 the current policy samples K = ``init_samples``
    responses for each prompt of the training pool (the first ``init_prompts`` when set), ``init_chunk``
    prompts per rollout call; with s_x successes (r summed over x's rows) ``init_offline`` sets
    ``N0 = 1/(1 − ρ_min)``, ``α0 = N0(s + ½)/(K + 1)``, ``β0 = N0(K − s + ½)/(K + 1)``: the Laplace-smoothed
    success rate with the weight of N0 observations, the effective memory of the tracker at ρ = ρ_min.

    Advantage (tracker before this step's update): ``A_i = r_i − p̂_{x_i}``, then over the batch
    ``Ã = (A − mean A)/(std A + eps)`` (unbiased std; ``normalize``); r = ``extras["correct"]`` (or the
    scalar reward clamped to [0, 1]). A batch of one row keeps A.

    ``after_update``: ``D_x = masked_mean_t |log π_now(y_prev) − log π_then(y_prev)|`` on the response stored
    at x's previous visit (first visit: D = 0); ``ρ_x = clamp(2^(−D_x/D_half), ρ_min, ρ_max)`` (or
    ``rho_constant``); ``α ← ρα + Σr``, ``β ← ρβ + Σ(1 − r)`` over x's rows; store this step's response
    and its log-probs under the updated policy. (The reference code keeps only the last row of a prompt
    that occurs twice; summing its rows is our choice and equal without duplicates.)

    ``sampling_weights``: ``w_x = sqrt(p̂_x(1 − p̂_x)) + eps_explore`` for the prioritized prompt sampler.

    A persistent, policy-drift-aware value estimate replaces the per-group baseline, so one response per
    prompt suffices and no group is ever degenerate.
    """

    paper = "Single-stream Policy Optimization (arXiv:2509.13232)"
    provenance = "CODE"

    rho_min: float = Field(default=0.875, gt=0, lt=1)
    rho_max: float = Field(default=0.96, gt=0, le=1)
    rho_constant: float | None = Field(default=None, gt=0, le=1)
    d_half: float = Field(default=0.06, gt=0)
    eps_explore: float = Field(default=0.05, ge=0)
    prior: float = Field(default=0.5, gt=0)
    normalize: bool = True
    eps: float = 1e-8
    reward: Literal["correct", "scalar"] = "correct"
    offline_init: bool = True
    """Estimate each pool prompt's prior from ``init_samples`` rollouts before training (``before_training``)."""
    init_samples: int = Field(default=8, ge=1)
    """K: responses per prompt in the offline estimate."""
    init_prompts: int | None = Field(default=None, gt=0)
    """Only the first ``init_prompts`` prompts of the pool (None: all of them)."""
    init_chunk: int = Field(default=64, gt=0)
    """Prompts per rollout call of the offline estimate (bounds its memory)."""

    _alpha: Tensor = PrivateAttr(default_factory=lambda: torch.zeros(0, dtype=torch.float64))
    _beta: Tensor = PrivateAttr(default_factory=lambda: torch.zeros(0, dtype=torch.float64))
    _last: dict[int, dict[str, Tensor]] = PrivateAttr(default_factory=dict)

    def needs(self) -> set[str]:
        return {"prompt_index"} | ({"correct"} if self.reward == "correct" else set())

    @model_validator(mode="after")
    def _rho_range(self):
        if self.rho_min > self.rho_max:
            raise ValueError(f"rho_min={self.rho_min} > rho_max={self.rho_max}")
        return self

    # ----------------------------------------------------------------- tracker
    def _grow(self, prompt_index: Tensor) -> Tensor:
        index = prompt_index.long().cpu()
        need = int(index.max()) + 1 if index.numel() else 0
        if need > len(self._alpha):
            fill = torch.full((need - len(self._alpha),), self.prior, dtype=torch.float64)
            self._alpha, self._beta = torch.cat([self._alpha, fill]), torch.cat([self._beta, fill])
        return index

    def success_probability(self, prompt_index: Tensor) -> Tensor:
        """``p̂_x = α_x/(α_x + β_x)`` ``[N]`` (float64, CPU) for the given prompt indices."""
        index = self._grow(prompt_index)
        return self._alpha[index] / (self._alpha[index] + self._beta[index])

    def sampling_weights(self, prompt_index: Tensor) -> Tensor:
        """``w_x = sqrt(p̂_x(1 − p̂_x)) + eps_explore`` ``[N]``: prompts near p̂ = 0.5 are drawn more often."""
        p = self.success_probability(prompt_index)
        return (p * (1 - p)).sqrt() + self.eps_explore

    def init_offline(self, prompt_index: Tensor, successes: Tensor, samples: int | Tensor) -> None:
        """Prior from K offline samples with s successes: ``N0 = 1/(1 − ρ_min)``,
        ``α0 = N0(s + ½)/(K + 1)``, ``β0 = N0(K − s + ½)/(K + 1)``."""
        index = self._grow(prompt_index)
        s = successes.double().cpu()
        k = torch.as_tensor(samples, dtype=torch.float64)
        n0 = 1 / (1 - self.rho_min)
        self._alpha[index] = n0 * (s + 0.5) / (k + 1)
        self._beta[index] = n0 * (k - s + 0.5) / (k + 1)

    def before_training(self, context) -> dict[str, float]:
        """Offline prior for the pool's prompts (see the class docstring); ``context`` is a
        ``polo.core.context.TrainingContext``. Returns ``spo/init_*`` metrics."""
        if not self.offline_init:
            return {}
        pool = context.pool_index.long().cpu()
        if self.init_prompts is not None:
            pool = pool[: self.init_prompts]
        if pool.numel() == 0:
            return {"spo/init_prompts": 0.0}
        n = int(pool.max()) + 1
        wins = torch.zeros(n, dtype=torch.float64)
        visits = torch.zeros(n, dtype=torch.float64)
        for chunk in pool.split(self.init_chunk):
            batch = context.rollout(chunk, self.init_samples)
            index = batch.extras["prompt_index"].long().cpu()
            keep = index < n  # rows of prompts outside the pool are ignored (only pool entries are read)
            r = self._rewards(batch)[keep]
            wins += segment_sum(r, index[keep], n)
            visits += segment_sum(torch.ones_like(r), index[keep], n)
        seen = visits[pool] > 0  # a prompt the rollout returned no row for keeps its prior
        self.init_offline(pool[seen], wins[pool][seen], visits[pool][seen])
        return {
            "spo/init_prompts": float(len(pool)),
            "spo/init_samples": float(visits[pool].sum()),
            "spo/init_accuracy": float(wins[pool].sum() / visits[pool].sum().clamp_min(1)),
            "spo/init_p_hat_mean": float(self.success_probability(pool).mean()),
        }

    def _rewards(self, batch: RolloutBatch) -> Tensor:
        if self.reward == "correct":
            return batch.extras["correct"].double().cpu()
        return batch.scalar_reward().double().cpu().clamp(0, 1)

    # --------------------------------------------------------------- advantage
    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        mask = batch.mask
        adv = self._rewards(batch) - self.success_probability(batch.extras["prompt_index"])
        if self.normalize:
            mean, std, _ = group_stats(adv, torch.zeros(len(adv), dtype=torch.long))
            adv = (adv - mean) / (std + self.eps)
        return AdvantageResult(adv.to(mask)[:, None] * mask)

    # ------------------------------------------------------------ after update
    def after_update(self, batch: RolloutBatch, context) -> dict[str, float]:
        index = self._grow(batch.extras["prompt_index"])
        distance = torch.zeros(len(index), dtype=torch.float64)
        seen = [i for i, x in enumerate(index.tolist()) if x in self._last]
        if seen:
            prev = self._stored_batch([self._last[int(index[i])] for i in seen])
            with torch.no_grad():
                now = context.policy_logp(prev.to(batch.response_ids.device)).double().cpu()
            distance[seen] = masked_mean((now - prev.old_logp).abs(), prev.mask, dim=-1)
        if self.rho_constant is not None:
            rho = torch.full_like(distance, self.rho_constant)
        else:
            rho = torch.exp2(-distance / self.d_half).clamp(self.rho_min, self.rho_max)
        uniq, inv = torch.unique(index, return_inverse=True)
        r = self._rewards(batch)
        rho_u = torch.zeros(len(uniq), dtype=torch.float64).scatter(0, inv, rho)
        wins, visits = segment_sum(r, inv, len(uniq)), segment_sum(torch.ones_like(r), inv, len(uniq))
        self._alpha[uniq] = rho_u * self._alpha[uniq] + wins
        self._beta[uniq] = rho_u * self._beta[uniq] + visits - wins
        with torch.no_grad():
            self._store(batch, index, context.policy_logp(batch))
        return {
            "spo/rho_mean": float(rho.mean()),
            "spo/policy_distance": float(distance.mean()),
            "spo/p_hat_mean": float(self.success_probability(index).mean()),
            "spo/tracked_prompts": float(len(self._last)),
        }

    def _store(self, batch: RolloutBatch, index: Tensor, logp: Tensor) -> None:
        """Keep each prompt's row (later rows of a prompt win), trimmed of padding, on the CPU."""
        prompt_valid = batch.prompt_mask.bool().cpu()
        response_mask = batch.response_mask.cpu()
        position = torch.arange(1, response_mask.shape[1] + 1)
        length = (position * response_mask.bool()).amax(-1) if response_mask.shape[1] else torch.zeros(len(index))
        for i, x in enumerate(index.tolist()):
            n = int(length[i])
            self._last[x] = {
                "prompt_ids": batch.prompt_ids[i].cpu()[prompt_valid[i]],
                "response_ids": batch.response_ids[i, :n].cpu(),
                "response_mask": batch.response_mask[i, :n].cpu(),
                "logp": logp[i, :n].double().cpu(),
            }

    @staticmethod
    def _stored_batch(rows: list[dict[str, Tensor]]) -> RolloutBatch:
        """The stored rows as a batch (prompts left-, responses right-padded); their log-probs then in
        ``old_logp``."""
        prompts = pad_sequence([r["prompt_ids"] for r in rows], batch_first=True, padding_side="left")
        prompt_mask = pad_sequence(
            [torch.ones_like(r["prompt_ids"]) for r in rows], batch_first=True, padding_side="left"
        )
        right = {k: pad_sequence([r[k] for r in rows], batch_first=True) for k in _STORED[1:]}
        return RolloutBatch(
            prompt_ids=prompts, prompt_mask=prompt_mask, response_ids=right["response_ids"],
            response_mask=right["response_mask"], group=torch.arange(len(rows)),
            rewards=torch.zeros(len(rows), dtype=torch.float64), old_logp=right["logp"],
        )

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        keys = sorted(self._last)
        state: dict[str, Any] = {"alpha": self._alpha.clone(), "beta": self._beta.clone()}
        state["last_prompt_index"] = torch.tensor(keys, dtype=torch.long)
        for k in _STORED:
            rows = [self._last[x][k] for x in keys]
            state[f"last_{k}"] = torch.cat(rows) if rows else torch.zeros(0)
        state["last_prompt_length"] = torch.tensor([len(self._last[x]["prompt_ids"]) for x in keys], dtype=torch.long)
        state["last_response_length"] = torch.tensor([len(self._last[x]["logp"]) for x in keys], dtype=torch.long)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._alpha, self._beta = state["alpha"].double().clone(), state["beta"].double().clone()
        keys = state["last_prompt_index"].tolist()
        if not keys:
            self._last = {}
            return
        prompt_len, response_len = state["last_prompt_length"].tolist(), state["last_response_length"].tolist()
        split = {k: state[f"last_{k}"].split(prompt_len if k == "prompt_ids" else response_len) for k in _STORED}
        self._last = {x: {k: split[k][j].clone() for k in _STORED} for j, x in enumerate(keys)}
