"""VSPO's value-based prompt sampler: groups without signal are replaced by the prompts of highest task value."""
from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import Field, PrivateAttr
from torch import Tensor

from polo.core.segment import group_reward_spread, segment_sum
from polo.engines.base import Rollouts
from polo.prompt_samplers.base import PROMPT_SAMPLERS, PromptSampler, keep_groups


def task_value(pass_rate: Tensor, difficulty_weight: float) -> Tensor:
    """``v = λ_v·d + (1 − λ_v)·u`` with difficulty ``d = 1 − p̂`` and uncertainty ``u = 4·p̂·(1 − p̂)``.

    ``u`` peaks at p̂ = 1/2 (a prompt the policy solves half the time), ``d`` prefers prompts it fails; a solved
    prompt (p̂ = 1) is worth 0, a hopeless one (p̂ = 0) ``λ_v``.
    """
    return difficulty_weight * (1 - pass_rate) + (1 - difficulty_weight) * 4 * pass_rate * (1 - pass_rate)


@PROMPT_SAMPLERS.register("value_resample")
class ValueResample(PromptSampler):
    """Roll out the next ``n`` prompts of the stream; drop each group whose rewards are all equal (no signal for a
    group baseline); refill with the candidates of highest task value ``v`` (``task_value``) among the training
    pool's prompts not yet rolled out this step, roll them out, and repeat until ``n`` groups are kept or
    ``max_resample_rounds`` refills are spent (then train on what was kept; if nothing was, on the last round).

    Every group rolled out (kept or not) updates its prompt's pass-rate estimate p̂, an exponential moving average
    of the group's verifier pass rate (``correct`` mean): ``p̂ ← (1 − α)·p̂ + α·pass`` with ``α = ema``; a prompt's
    first group sets p̂ to its pass rate. A prompt never rolled out is valued as if ``p̂ = prior`` (0.5 by
    default: maximal uncertainty, v = 0.75 at λ_v = 0.5, near the top of v's range [0, 0.78]), so unexplored
    prompts are tried before prompts known to be solved or hopeless. Ties in v are broken in a random order
    drawn from the step's generator. The p̂ table is the sampler's state, checkpointed with the run.

    ``signal`` is what must vary within a group for it to be kept: ``reward`` (the weighted reward the engine
    scored; shaping terms computed later, such as a judge's, are not part of it) or ``correct`` (the verifier).

    Paper: Value-based Sampling Policy Optimization and Progressive Reward Shaping (arXiv:2512.07478);
    reconstructed from its abstract (the value formula, the EMA and the treatment of unseen prompts are this
    library's choices).
    """

    paper = "Value-based Sampling Policy Optimization and Progressive Reward Shaping (arXiv:2512.07478)"
    provenance = "RECONSTRUCTED"
    requires = frozenset({"correct", "prompt_index"})

    difficulty_weight: float = Field(0.5, ge=0.0, le=1.0)
    """λ_v: weight of difficulty against uncertainty in the task value."""
    ema: float = Field(0.5, gt=0.0, le=1.0)
    """α: rate of the pass-rate moving average."""
    max_resample_rounds: int = Field(3, ge=0)
    """Refill rounds per step after the first rollout."""
    prior: float = Field(0.5, ge=0.0, le=1.0)
    """p̂ at which a prompt never rolled out is valued."""
    signal: Literal["reward", "correct"] = "reward"

    _pass_rate: Tensor = PrivateAttr(default_factory=lambda: torch.empty(0, dtype=torch.float64))
    """p̂ per training-pool prompt, NaN for a prompt never rolled out."""

    def state_dict(self) -> dict[str, Any]:
        return {"pass_rate": self._pass_rate.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._pass_rate = state["pass_rate"].clone()

    def values(self) -> Tensor:
        """``v`` of every pool prompt (unseen ones at ``prior``)."""
        return task_value(torch.nan_to_num(self._pass_rate, nan=self.prior), self.difficulty_weight)

    def observe(self, got: Rollouts) -> None:
        """Move p̂ of each rolled-out prompt towards the pass rate of its rows (all its groups together)."""
        prompt, inv = torch.unique(got.batch.extras["prompt_index"], return_inverse=True)
        rows = segment_sum(torch.ones(len(inv), dtype=torch.float64), inv)
        passed = segment_sum(got.batch.extras["correct"].to(torch.float64), inv) / rows
        old = self._pass_rate[prompt]
        self._pass_rate[prompt] = torch.where(old.isnan(), passed, (1 - self.ema) * old + self.ema * passed)

    def keep(self, got: Rollouts) -> Tensor:
        batch = got.batch
        signal = batch.scalar_reward() if self.signal == "reward" else batch.extras["correct"].to(batch.rewards)
        return group_reward_spread(signal, batch.group) > 0

    def refill(self, used: Tensor, want: int, generator: torch.Generator) -> list[int]:
        """Up to ``want`` unused pool indices of highest v, ties in a random order."""
        order = torch.randperm(len(used), generator=generator)
        value = self.values()[order].masked_fill(used[order], -torch.inf)
        best = torch.sort(value, descending=True, stable=True).indices[:want]
        return order[best[value[best] > -torch.inf]].tolist()

    def collect(self, stream, generate, n_prompts, generator, components):
        pool = stream.pool
        if len(self._pass_rate) != len(pool):
            if len(self._pass_rate):
                raise ValueError(f"prompt_sampler value_resample: its pass-rate table has {len(self._pass_rate)} "
                                 f"prompts but the training pool has {len(pool)}")
            self._pass_rate = torch.full((len(pool),), torch.nan, dtype=torch.float64)
        used = torch.zeros(len(pool), dtype=torch.bool)
        refill_values = []

        def next_round(done: int, want: int) -> Rollouts | None:
            if done == 0:
                examples, pick = stream.next(n_prompts)
            else:
                pick = self.refill(used, want, generator) if done <= self.max_resample_rounds else []
                if not pick:
                    return None
                refill_values.append(self.values()[pick])
                examples = [pool[i] for i in pick]
            got = generate(examples, pick)
            self.observe(got)
            used[got.batch.extras["prompt_index"]] = True
            return got

        got, have, generated, rounds = keep_groups(n_prompts, next_round, self.keep)
        seen = ~self._pass_rate.isnan()
        metrics = {"sampler/resample_rounds": rounds - 1, "sampler/kept_frac": have / max(generated, 1),
                   "sampler/groups": have, "sampler/seen_frac": float(seen.double().mean()),
                   "sampler/pass_rate_mean": float(self._pass_rate[seen].mean()) if seen.any() else 0.0,
                   "sampler/refill_value": float(torch.cat(refill_values).mean()) if refill_values else 0.0}
        return got, metrics
