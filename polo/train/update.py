"""The policy (and critic) update on one scored batch: epochs × minibatches × micro-batches.

Each optimizer step's loss is aggregated with the token / sequence counts of its whole minibatch
(``StepCounts``), so gradient accumulation over micro-batches gives the same step as one big batch.
Minibatches are made of whole groups; micro-batches are cut on group boundaries when a component needs whole
groups. When the policy loss is the only term and is inert at zero advantage
(``PolicyLoss.inert_at_zero_advantage``), rows whose advantages are all 0 (e.g. GRPO groups with equal
rewards) skip the forward/backward: same gradient, less work; ``policy/*`` metrics then describe the rows
that carry gradient.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from polo.core.aggregation import Aggregation, StepCounts
from polo.core.batch import RolloutBatch
from polo.core.divergences import Divergence
from polo.core.losses.base import PolicyLoss
from polo.core.optim_hooks import OptimizerHook
from polo.core.regularizers import Regularizer
from polo.core.segment import run_start_rows, run_starts
from polo.dist.data_parallel import DataParallel
from polo.dist.fsdp import clip_grad_norm, is_shard
from polo.train.critics import Critics


@dataclass
class LossTerms:
    """``loss = policy_loss (aggregated) + kl_coef·agg(divergence(logp, ref_logp)) − entropy_coef·agg(H)
    + Σ_r coef_r·Σ u_r·s_r / Σ_minibatch s_r`` (the regularizers, each over its own scope of tokens); the KL
    coefficient is the trainer's state and is passed to each ``Updater.run``."""

    policy_loss: PolicyLoss
    aggregation: Aggregation
    divergence: Divergence
    entropy_coef: float = 0.0
    regularizers: list[Regularizer] = field(default_factory=list)


@dataclass
class UpdateSettings:
    epochs: int = 1
    minibatches: int = 1
    micro_batch_size: int | None = None
    grad_clip: float | None = 1.0
    temperature: float = 1.0
    max_new_tokens: int = 1
    """The aggregation's default L_norm (the response length cap)."""
    skip_zero_advantage_rows: bool = True
    whole_groups: bool = False
    """Cut micro-batches on group boundaries (a component needs whole groups)."""
    micro_batch_tokens: int | None = None
    """Most padded tokens per micro-batch (``micro_batches``); None: no token limit."""


def group_minibatches(group: torch.Tensor, n: int, generator: torch.Generator) -> list[torch.Tensor]:
    """Row indices of ``n`` minibatches made of whole groups in random order: a group's samples stay together
    (per-group losses see whole groups, and its G samples share one prompt forward, polo.policy.prefix)."""
    ids, inverse = group.unique(return_inverse=True)
    rank = torch.randperm(len(ids), generator=generator)[inverse]  # each row's group's random position
    order = torch.argsort(rank, stable=True)
    bounds = torch.searchsorted(rank[order], torch.tensor([len(ids) * k // n for k in range(1, n)]))
    return [rows for rows in torch.tensor_split(order, bounds) if len(rows)]


def padded_lengths(batch) -> torch.Tensor:
    """``[B]`` each row's length in a training forward: its prompt's tokens (the forward trims left padding to
    the micro-batch's longest prompt) + the batch's response width."""
    return batch.prompt_mask.sum(1) + batch.response_ids.shape[1]


def micro_batches(group: torch.Tensor, size: int | None, parts: int = 1, whole_groups: bool = False,
                  lengths: torch.Tensor | None = None, max_tokens: int | None = None) -> list[torch.Tensor]:
    """Row indices of consecutive micro-batches of ``size`` rows (None: ``parts`` equal parts). With
    ``whole_groups`` (rows of a group are contiguous) each group goes to the micro-batch where it starts, so
    no group is split; a micro-batch then holds ``size`` rows when every group has a size dividing it.

    ``max_tokens`` (with ``lengths``, ``padded_lengths``): a micro-batch's padded size, its rows × its longest
    row, stays within ``max_tokens`` and its rows within ``size``: rows (whole groups with ``whole_groups``) are
    packed in order, a micro-batch closing when the next would break either limit. A row or group above a
    limit on its own is a micro-batch of its own (never an error: it cannot be split).
    """
    n = len(group)
    size = size or max(1, math.ceil(n / parts))
    rows = torch.arange(n)
    if n == 0:
        return []
    if max_tokens is not None:
        starts = run_starts(group) if whole_groups else torch.ones(n, dtype=torch.bool)
        return _packed(rows, starts, lengths, size, max_tokens)
    if not whole_groups:
        return list(rows.split(size))
    part = run_start_rows(group) // size  # a group goes where its first row falls
    return [rows[part == k] for k in part.unique()]


def _packed(rows: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor, size: int,
            max_tokens: int) -> list[torch.Tensor]:
    """Greedy in-order packing of units (a unit starts at each ``starts`` row) under ``size`` rows and
    ``max_tokens`` = rows × longest length."""
    bounds = [*starts.nonzero().squeeze(1).tolist(), len(rows)]
    longest_of = lengths.tolist()
    out, first, longest = [], 0, 0
    for a, b in zip(bounds[:-1], bounds[1:]):
        unit = max(longest_of[a:b])
        if a > first and (b - first > size or (b - first) * max(longest, unit) > max_tokens):
            out.append(rows[first:a])
            first, longest = a, 0
        longest = max(longest, unit)
    return [*out, rows[first:]]


@dataclass
class Minibatch:
    """One optimizer step's share of the batch (``Updater.minibatch_plan``)."""

    counts: StepCounts
    """Token and sequence counts of the whole minibatch, every term's aggregation denominator."""
    scopes: list[float]
    """Each regularizer's scope total over the whole minibatch."""
    size: int
    """Rows of the whole minibatch."""
    batch: RolloutBatch
    """The rows trained here: inert rows left out (when they may be), this rank's share."""
    micro: list[torch.Tensor]
    """Row indices into ``batch`` of each micro-batch."""
    empty: bool
    """Every row of the minibatch was inert: the step is taken on zero gradients."""
    passes: int
    """Forward/backward passes this rank runs: ``len(micro)``, or under ``lockstep`` the most micro-batches of
    any rank (the passes past ``len(micro)`` are zero-weight passes over ``idle``)."""
    idle: RolloutBatch | None
    """Under ``lockstep``, one row of the minibatch: the input of a zero-weight pass."""


@dataclass
class UpdateTotals:
    """What the update's steps add up: token-weighted sums of the diagnostics, and per optimizer step the gradient
    norm, the learning-rate factor and whether it was skipped."""

    sums: dict[str, float] = field(default_factory=dict)
    weight: float = 0.0
    grad_norms: list[float] = field(default_factory=list)
    lr_factors: list[float] = field(default_factory=list)
    skipped: int = 0

    def add(self, stats: dict[str, float], weight: float) -> None:
        """One micro-batch's diagnostics, weighted by its response tokens."""
        self.weight += weight
        for k, v in stats.items():
            self.sums[k] = self.sums.get(k, 0.0) + weight * v

    def metrics(self, has_hook: bool) -> dict[str, float]:
        """The weighted means, ``optim/skipped_nonfinite``, ``optim/grad_norm`` and (with a gradient hook)
        ``optim/lr_factor``."""
        out = {k: v / max(self.weight, 1e-9) for k, v in self.sums.items()}
        out["optim/skipped_nonfinite"] = self.skipped
        if self.grad_norms:
            out["optim/grad_norm"] = sum(self.grad_norms) / len(self.grad_norms)
        if has_hook and self.lr_factors:
            out["optim/lr_factor"] = sum(self.lr_factors) / len(self.lr_factors)
        return out


def _flat_grad(params) -> torch.Tensor:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])


class Updater:
    """The optimizer's inner loop over one batch: the policy's loss terms, the critics, the optimizer step
    (``gradient_hook``: a learning-rate factor from K gradient estimates per step, e.g. OBLR-PO's SNR).

    An optimizer step whose gradient norm is not finite (a NaN or inf loss, gradient or advantage) is skipped,
    for the policy and for each critic alike, and counted in ``optim/skipped_nonfinite``."""

    def __init__(self, policy, optimizer: torch.optim.Optimizer, terms: LossTerms, critics: Critics,
                 settings: UpdateSettings, generator: torch.Generator, gradient_hook: OptimizerHook | None = None,
                 data_parallel: DataParallel | None = None, lockstep: bool = False):
        """``data_parallel``: this rank's share of each minibatch is trained here and the gradients summed
        over the ranks before clipping (polo.dist.data_parallel); None: one process. ``lockstep``: the models are
        sharded (polo.dist.fsdp), whose every forward and backward is a collective: each rank runs as many
        passes per optimizer step as the rank with the most micro-batches, the extra ones with zero weight."""
        self.policy, self.optimizer, self.terms, self.critics = policy, optimizer, terms, critics
        self.settings, self.generator, self.hook = settings, generator, gradient_hook
        self.data_parallel, self.lockstep = data_parallel, lockstep and data_parallel is not None
        self.params = [p for g in optimizer.param_groups for p in g["params"]]

    def skips_inert_rows(self, kl_coef: float, policy_frozen: bool) -> bool:
        """Whether rows with all-zero advantages can leave the update without changing the gradient."""
        return (self.settings.skip_zero_advantage_rows and self.terms.policy_loss.inert_at_zero_advantage
                and kl_coef == 0 and not self.terms.entropy_coef and not self.critics and self.hook is None
                and not self.terms.regularizers and not policy_frozen)

    def run(self, batch, kl_coef: float = 0.0, policy_frozen: bool = False) -> dict[str, float]:
        """Train on ``batch``: one ``step`` per minibatch of ``minibatch_plan``; returns the update's metrics
        (token-weighted means of the micro-batches' diagnostics, the mean gradient norm and learning-rate
        factor, the skipped steps)."""
        totals = UpdateTotals()
        self.policy.train()
        for minibatch in self.minibatch_plan(batch, self.skips_inert_rows(kl_coef, policy_frozen)):
            self.step(minibatch, kl_coef, policy_frozen, totals)
        self.policy.eval()
        if self.data_parallel is not None:
            totals.sums, totals.weight = self.data_parallel.sum_metrics(totals.sums, totals.weight)
        return totals.metrics(self.hook is not None)

    def minibatch_plan(self, batch, skip_inert: bool) -> Iterator[Minibatch]:
        """The update's optimizer steps in order: for each of ``epochs``, ``minibatches`` random minibatches of
        whole groups (``group_minibatches``, drawn from the updater's generator as each epoch starts), each with
        the rows this rank trains (inert rows left out when ``skip_inert``, this rank's share under data
        parallelism) cut into micro-batches."""
        s = self.settings
        for _ in range(s.epochs):
            for rows in group_minibatches(batch.group, s.minibatches, self.generator):
                whole = batch.select(rows)
                trained = whole.select((whole.advantages != 0).any(-1)) if skip_inert else whole
                empty = trained.batch_size == 0
                if self.data_parallel is not None:  # this rank's rows; the loss keeps the minibatch's counts
                    trained = self.data_parallel.shard(trained, s.whole_groups)
                parts = micro_batches(trained.group, s.micro_batch_size, self.hook.estimates if self.hook else 1,
                                      s.whole_groups, padded_lengths(trained), s.micro_batch_tokens)
                passes = max(self.data_parallel.gather(len(parts))) if self.lockstep else len(parts)
                yield Minibatch(StepCounts.from_mask(whole.response_mask, s.max_new_tokens),
                                [float(reg.scope(whole).sum()) for reg in self.terms.regularizers], len(rows),
                                trained, parts, empty, passes, whole.select(torch.arange(1)) if self.lockstep else None)

    def step(self, minibatch: Minibatch, kl_coef: float, policy_frozen: bool, totals: UpdateTotals) -> None:
        """One optimizer step on ``minibatch``: the micro-batches' backwards, the gradients summed over the
        ranks, the policy's clipped step (skipped when its gradient norm is not finite) and the critics'."""
        if minibatch.empty:  # every row inert: the same optimizer step as a backward of zeros
            for p in self.params:
                p.grad = torch.zeros_like(p)
        estimates = self.backward(minibatch, kl_coef, policy_frozen, totals)
        if self.data_parallel is not None:  # shards' gradients were summed by FSDP's reduce-scatter
            self.data_parallel.all_reduce_grads([p for p in (*self.params, *self.critics.parameters())
                                                 if not is_shard(p)])
        if not policy_frozen:
            norm = clip_grad_norm(self.params, self.settings.grad_clip or math.inf)
            if math.isfinite(norm):
                totals.grad_norms.append(norm)
                several = self.hook is not None and len(estimates) > 1
                factor = self.hook.lr_factor(torch.stack(estimates)) if several else 1.0
                totals.lr_factors.append(factor)
                self.optimizer_step(factor)
            else:  # a non-finite loss or gradient never reaches the weights
                totals.skipped += 1
        self.optimizer.zero_grad(set_to_none=True)
        totals.skipped += self.critics.step()

    def backward(self, minibatch: Minibatch, kl_coef: float, policy_frozen: bool,
                 totals: UpdateTotals) -> list[torch.Tensor]:
        """The policy's and the critics' backward on each micro-batch of ``minibatch``, their diagnostics added to
        ``totals``; returns the gradient hook's per-micro-batch gradient estimates (none without a hook)."""
        trained, parts = minibatch.batch, minibatch.micro
        estimates, previous = [], None
        for _ in range(len(parts), minibatch.passes):  # lockstep: this rank's extra passes add nothing
            if not policy_frozen:
                self.policy_backward(minibatch.idle, minibatch.counts, minibatch.size, kl_coef, minibatch.scopes,
                                     weight=0.0)
            self.critics.backward(minibatch.idle, minibatch.counts, self.terms.aggregation, weight=0.0)
        for micro_rows in parts:
            micro = trained if len(parts) == 1 else trained.select(micro_rows)
            stats = {} if policy_frozen else self.policy_backward(micro, minibatch.counts, minibatch.size, kl_coef,
                                                                  minibatch.scopes)
            stats.update(self.critics.backward(micro, minibatch.counts, self.terms.aggregation))
            if self.hook is not None and not policy_frozen:
                grad = _flat_grad(self.params)
                estimates.append((grad - (previous if previous is not None else 0)) * len(parts))
                previous = grad
            totals.add(stats, float(micro.response_mask.sum()))
        return estimates

    def optimizer_step(self, lr_factor: float) -> None:
        """One optimizer step at ``lr_factor`` × the scheduled learning rate."""
        base = [g["lr"] for g in self.optimizer.param_groups]
        for g in self.optimizer.param_groups:
            g["lr"] *= lr_factor
        self.optimizer.step()
        for g, lr in zip(self.optimizer.param_groups, base):
            g["lr"] = lr

    def policy_backward(self, micro, counts: StepCounts, minibatch_rows: int, kl_coef: float,
                        scopes: list[float] = (), weight: float = 1.0) -> dict[str, float]:
        """Backward of ``weight`` × the policy's loss terms on one micro-batch (``scopes``: each regularizer's
        scope total over the minibatch); returns its diagnostics."""
        s, t = self.settings, self.terms
        mask = micro.mask
        n = mask.sum().clamp_min(1)
        stats: dict[str, float] = {}
        fw = self.policy.forward_logp(micro.prompt_ids, micro.prompt_mask, micro.response_ids, micro.response_mask,
                                      temperature=s.temperature, return_entropy=True if t.entropy_coef else "metric",
                                      return_full=any(reg.full_distribution for reg in t.regularizers),
                                      hidden_layer=t.policy_loss.training_hidden_layer,
                                      **self.policy.model_inputs(micro))
        logp, entropy = fw["logp"], fw["entropy"]
        if t.policy_loss.training_hidden_layer is None:
            out = t.policy_loss(logp, micro)
        else:
            out = t.policy_loss(logp, micro, hidden=fw["hidden_states"])
        if out.loss is not None:
            loss = out.loss * (micro.batch_size / minibatch_rows)
        else:
            loss = t.aggregation(out.token_loss, mask, counts)
        if kl_coef > 0:
            kl = t.divergence(logp, micro.ref_logp)
            loss = loss + kl_coef * t.aggregation(kl, mask, counts)
            stats["policy/kl_ref"] = float((kl.detach() * mask).sum() / n)
        if t.entropy_coef:
            loss = loss - t.entropy_coef * t.aggregation(entropy, mask, counts)
        for reg, total in zip(t.regularizers, scopes):
            reg_out = reg(logp, micro, fw.get("logprobs_full"))
            term = (reg_out.token_loss * reg.scope(micro)).sum() / (total if total > 0 else 1.0)
            loss = loss + reg.coef * term
            stats[f"loss/{reg.registry_name}"] = float(term.detach())
            stats.update({f"{reg.registry_name}/{k}": float(v) for k, v in reg_out.metrics.items()})
        (loss * weight).backward()
        log_ratio = (logp.detach() - micro.old_logp) * mask
        ratio = log_ratio.clamp(-20, 20).exp() * mask
        stats["policy/kl_old"] = float(-log_ratio.sum() / n)
        stats["policy/ratio_ess"] = float(ratio.sum() ** 2 / ((ratio**2).sum() * n).clamp_min(1e-12))
        stats["policy/entropy"] = float((entropy.detach() * mask).sum() / n)
        stats["loss/policy"] = float(loss.detach())
        stats.update({f"policy/{k}": float(v) for k, v in out.metrics.items()})
        return stats
