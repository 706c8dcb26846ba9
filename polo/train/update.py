"""The policy (and critic) update on one scored batch: epochs × minibatches × micro-batches.

Each optimizer step's loss is aggregated with the token / sequence counts of its whole minibatch
(``StepCounts``), so gradient accumulation over micro-batches gives the same step as one big batch.
When the policy loss is the only term and is inert at zero advantage (``PolicyLoss.inert_at_zero_advantage``),
rows whose advantages are all 0 (e.g. GRPO groups with equal rewards) skip the forward/backward: same
gradient, less work; ``policy/*`` metrics then describe the rows that carry gradient.
"""
from __future__ import annotations

import math

import torch

from polo.core.aggregation import StepCounts
from polo.core.losses.value import clipped_value_loss


def _micro_slices(n: int, size: int | None, parts: int = 1) -> list[slice]:
    size = size or max(1, math.ceil(n / parts))
    return [slice(i, min(n, i + size)) for i in range(0, n, size)]


def group_minibatches(group: torch.Tensor, n: int, generator: torch.Generator) -> list[torch.Tensor]:
    """Row indices of ``n`` minibatches made of whole groups in random order: a group's samples stay together
    (per-group losses see whole groups, and its G samples share one prompt forward, polo.policy.prefix)."""
    ids, inverse = group.unique(return_inverse=True)
    rank = torch.randperm(len(ids), generator=generator)[inverse]  # each row's group's random position
    order = torch.argsort(rank, stable=True)
    bounds = torch.searchsorted(rank[order], torch.tensor([len(ids) * k // n for k in range(1, n)]))
    return [rows for rows in torch.tensor_split(order, bounds) if len(rows)]


def _flat_grad(params) -> torch.Tensor:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])


class Updater:
    """Owns the optimizers' inner loop; ``trainer`` supplies policy, critics, components and config."""

    def __init__(self, trainer):
        self.t = trainer

    def run(self, batch) -> dict[str, float]:
        t, r = self.t, self.t.recipe
        policy_frozen = t.critic is not None and t.step_count < r.critic.warmup_steps
        sums: dict[str, float] = {}
        weight_total = 0.0
        grad_norms, lr_factors = [], []
        hook = t.components.get("optimizer_hook")
        skip_inert = (r.train.skip_zero_advantage_rows and t.policy_loss.inert_at_zero_advantage
                      and t.kl_coef == 0 and not r.entropy_coef
                      and not t.critic_optimizers and hook is None and not policy_frozen)
        t.policy.train()
        for _ in range(r.train.epochs):
            for rows in group_minibatches(batch.group, r.train.minibatches, t.shuffle_generator):
                minibatch = batch.select(rows)
                counts = StepCounts.from_mask(minibatch.response_mask, t.max_new_tokens)
                if skip_inert:  # rows with all-zero advantages add nothing to the gradient
                    minibatch = minibatch.select((minibatch.advantages != 0).any(-1))
                    if minibatch.batch_size == 0:
                        for p in t.params:  # the same optimizer step as a backward of zeros
                            p.grad = torch.zeros_like(p)
                slices = _micro_slices(minibatch.batch_size, r.train.micro_batch_size, hook.estimates if hook else 1)
                estimates, previous = [], None
                for part in slices:
                    micro_rows = torch.arange(minibatch.batch_size)[part]
                    micro = minibatch if len(slices) == 1 else minibatch.select(micro_rows)
                    stats = self.backward(micro, counts, len(rows), policy_frozen)
                    if hook is not None and not policy_frozen:
                        grad = _flat_grad(t.params)
                        estimates.append((grad - (previous if previous is not None else 0)) * len(slices))
                        previous = grad
                    w = float(micro.response_mask.sum())
                    weight_total += w
                    for k, v in stats.items():
                        sums[k] = sums.get(k, 0.0) + w * v
                if not policy_frozen:
                    grad_norms.append(float(torch.nn.utils.clip_grad_norm_(t.params, r.optim.grad_clip or math.inf)))
                    factor = hook.lr_factor(torch.stack(estimates)) if hook is not None and len(estimates) > 1 else 1.0
                    lr_factors.append(factor)
                    base = [g["lr"] for g in t.optimizer.param_groups]
                    for g in t.optimizer.param_groups:
                        g["lr"] *= factor
                    t.optimizer.step()
                    for g, lr in zip(t.optimizer.param_groups, base):
                        g["lr"] = lr
                t.optimizer.zero_grad(set_to_none=True)
                for critic, optimizer in t.critics():
                    torch.nn.utils.clip_grad_norm_(critic.parameters(), r.optim.grad_clip or math.inf)
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
        t.policy.eval()
        out = {k: v / max(weight_total, 1e-9) for k, v in sums.items()}
        if grad_norms:
            out["optim/grad_norm"] = sum(grad_norms) / len(grad_norms)
        if hook is not None and lr_factors:
            out["optim/lr_factor"] = sum(lr_factors) / len(lr_factors)
        return out

    def backward(self, micro, counts: StepCounts, minibatch_rows: int, policy_frozen: bool) -> dict[str, float]:
        t, r = self.t, self.t.recipe
        mask = micro.mask
        n = mask.sum().clamp_min(1)
        stats: dict[str, float] = {}
        if not policy_frozen:
            fw = t.policy.forward_logp(micro.prompt_ids, micro.prompt_mask, micro.response_ids,
                                       micro.response_mask, temperature=r.rollout.temperature,
                                       return_entropy=True if r.entropy_coef else "metric",
                                       allow=micro.extras.get("allow"))
            logp, entropy = fw["logp"], fw["entropy"]
            out = t.policy_loss(logp, micro)
            if out.loss is not None:
                loss = out.loss * (micro.batch_size / minibatch_rows)
            else:
                loss = t.aggregation(out.token_loss, mask, counts)
            if t.kl_coef > 0:
                kl = t.divergence(logp, micro.ref_logp)
                loss = loss + t.kl_coef * t.aggregation(kl, mask, counts)
                stats["policy/kl_ref"] = float((kl.detach() * mask).sum() / n)
            if r.entropy_coef:
                loss = loss - r.entropy_coef * t.aggregation(entropy, mask, counts)
            loss.backward()
            log_ratio = (logp.detach() - micro.old_logp) * mask
            ratio = log_ratio.clamp(-20, 20).exp() * mask
            stats["policy/kl_old"] = float(-log_ratio.sum() / n)
            stats["policy/ratio_ess"] = float(ratio.sum() ** 2 / ((ratio**2).sum() * n).clamp_min(1e-12))
            stats["policy/entropy"] = float((entropy.detach() * mask).sum() / n)
            stats["loss/policy"] = float(loss.detach())
            stats.update({f"policy/{k}": float(v) for k, v in out.metrics.items()})
        for name, critic, prompt_ids, prompt_mask, old in t.critic_inputs(micro):
            values = critic(prompt_ids, prompt_mask, micro.response_ids, micro.response_mask)
            vloss = t.aggregation(clipped_value_loss(values, old, micro.returns, r.critic.value_clip), mask, counts)
            vloss.backward()
            stats[f"loss/{name}"] = float(vloss.detach())
        return stats
