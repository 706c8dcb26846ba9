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
from dataclasses import dataclass, field

import torch

from polo.core.aggregation import Aggregation, StepCounts
from polo.core.divergences import Divergence
from polo.core.losses.base import PolicyLoss
from polo.core.optim_hooks import OptimizerHook
from polo.core.regularizers import Regularizer
from polo.core.segment import run_start_rows, run_starts
from polo.dist.data_parallel import DataParallel
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


def _flat_grad(params) -> torch.Tensor:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])


class Updater:
    """The optimizer's inner loop over one batch: the policy's loss terms, the critics, the optimizer step
    (``gradient_hook``: a learning-rate factor from K gradient estimates per step, e.g. OBLR-PO's SNR).

    An optimizer step whose gradient norm is not finite (a NaN or inf loss, gradient or advantage) is skipped,
    for the policy and for each critic alike, and counted in ``optim/skipped_nonfinite``."""

    def __init__(self, policy, optimizer: torch.optim.Optimizer, terms: LossTerms, critics: Critics,
                 settings: UpdateSettings, generator: torch.Generator, gradient_hook: OptimizerHook | None = None,
                 data_parallel: DataParallel | None = None):
        """``data_parallel``: this rank's share of each minibatch is trained here and the gradients summed
        over the ranks before clipping (polo.dist.data_parallel); None: one process."""
        self.policy, self.optimizer, self.terms, self.critics = policy, optimizer, terms, critics
        self.settings, self.generator, self.hook = settings, generator, gradient_hook
        self.data_parallel = data_parallel
        self.params = [p for g in optimizer.param_groups for p in g["params"]]

    def skips_inert_rows(self, kl_coef: float, policy_frozen: bool) -> bool:
        """Whether rows with all-zero advantages can leave the update without changing the gradient."""
        return (self.settings.skip_zero_advantage_rows and self.terms.policy_loss.inert_at_zero_advantage
                and kl_coef == 0 and not self.terms.entropy_coef and not self.critics and self.hook is None
                and not self.terms.regularizers and not policy_frozen)

    def run(self, batch, kl_coef: float = 0.0, policy_frozen: bool = False) -> dict[str, float]:
        s = self.settings
        sums: dict[str, float] = {}
        weight_total = 0.0
        grad_norms, lr_factors = [], []
        skipped = 0
        skip_inert = self.skips_inert_rows(kl_coef, policy_frozen)
        self.policy.train()
        for _ in range(s.epochs):
            for rows in group_minibatches(batch.group, s.minibatches, self.generator):
                minibatch = batch.select(rows)
                counts = StepCounts.from_mask(minibatch.response_mask, s.max_new_tokens)
                scopes = [float(reg.scope(minibatch).sum()) for reg in self.terms.regularizers]
                if skip_inert:  # rows with all-zero advantages add nothing to the gradient
                    minibatch = minibatch.select((minibatch.advantages != 0).any(-1))
                    if minibatch.batch_size == 0:
                        for p in self.params:  # the same optimizer step as a backward of zeros
                            p.grad = torch.zeros_like(p)
                if self.data_parallel is not None:  # this rank's rows; the loss keeps the minibatch's counts
                    minibatch = self.data_parallel.shard(minibatch, s.whole_groups)
                parts = micro_batches(minibatch.group, s.micro_batch_size, self.hook.estimates if self.hook else 1,
                                      s.whole_groups, padded_lengths(minibatch), s.micro_batch_tokens)
                estimates, previous = [], None
                for micro_rows in parts:
                    micro = minibatch if len(parts) == 1 else minibatch.select(micro_rows)
                    stats = {} if policy_frozen else self.policy_backward(micro, counts, len(rows), kl_coef, scopes)
                    stats.update(self.critics.backward(micro, counts, self.terms.aggregation))
                    if self.hook is not None and not policy_frozen:
                        grad = _flat_grad(self.params)
                        estimates.append((grad - (previous if previous is not None else 0)) * len(parts))
                        previous = grad
                    w = float(micro.response_mask.sum())
                    weight_total += w
                    for k, v in stats.items():
                        sums[k] = sums.get(k, 0.0) + w * v
                if self.data_parallel is not None:
                    self.data_parallel.all_reduce_grads([*self.params, *self.critics.parameters()])
                if not policy_frozen:
                    norm = float(torch.nn.utils.clip_grad_norm_(self.params, s.grad_clip or math.inf))
                    if math.isfinite(norm):
                        grad_norms.append(norm)
                        several = self.hook is not None and len(estimates) > 1
                        factor = self.hook.lr_factor(torch.stack(estimates)) if several else 1.0
                        lr_factors.append(factor)
                        self.optimizer_step(factor)
                    else:  # a non-finite loss or gradient never reaches the weights
                        skipped += 1
                self.optimizer.zero_grad(set_to_none=True)
                skipped += self.critics.step()
        self.policy.eval()
        if self.data_parallel is not None:
            sums, weight_total = self.data_parallel.sum_metrics(sums, weight_total)
        out = {k: v / max(weight_total, 1e-9) for k, v in sums.items()}
        out["optim/skipped_nonfinite"] = skipped
        if grad_norms:
            out["optim/grad_norm"] = sum(grad_norms) / len(grad_norms)
        if self.hook is not None and lr_factors:
            out["optim/lr_factor"] = sum(lr_factors) / len(lr_factors)
        return out

    def optimizer_step(self, lr_factor: float) -> None:
        """One optimizer step at ``lr_factor`` × the scheduled learning rate."""
        base = [g["lr"] for g in self.optimizer.param_groups]
        for g in self.optimizer.param_groups:
            g["lr"] *= lr_factor
        self.optimizer.step()
        for g, lr in zip(self.optimizer.param_groups, base):
            g["lr"] = lr

    def policy_backward(self, micro, counts: StepCounts, minibatch_rows: int, kl_coef: float,
                        scopes: list[float] = ()) -> dict[str, float]:
        """Backward of the policy's loss terms on one micro-batch (``scopes``: each regularizer's scope total
        over the minibatch); returns its diagnostics."""
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
        loss.backward()
        log_ratio = (logp.detach() - micro.old_logp) * mask
        ratio = log_ratio.clamp(-20, 20).exp() * mask
        stats["policy/kl_old"] = float(-log_ratio.sum() / n)
        stats["policy/ratio_ess"] = float(ratio.sum() ** 2 / ((ratio**2).sum() * n).clamp_min(1e-12))
        stats["policy/entropy"] = float((entropy.detach() * mask).sum() / n)
        stats["loss/policy"] = float(loss.detach())
        stats.update({f"policy/{k}": float(v) for k, v in out.metrics.items()})
        return stats
