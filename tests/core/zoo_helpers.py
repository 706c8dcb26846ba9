"""Helpers for the algorithm-zoo tests: float64 batches built from importance ratios."""
import torch

from .helpers import build_batch


def rows(x) -> torch.Tensor:
    x = torch.as_tensor(x, dtype=torch.float64)
    return x if x.dim() == 2 else x[None]


def ratio_batch(ratio, adv, logp=None, mask=None, rewards=None, group=None, **extras):
    """``(logp leaf with grad, batch)`` where ``exp(logp − old_logp) = ratio``; logp defaults to −1."""
    ratio, adv = rows(ratio), rows(adv)
    logp = torch.full_like(ratio, -1.0) if logp is None else rows(logp)
    logp.requires_grad_(True)
    mask = torch.ones_like(ratio) if mask is None else rows(mask)
    rewards = [0.0] * ratio.shape[0] if rewards is None else rewards
    batch = build_batch(rewards, group=group, mask=mask, old_logp=logp.detach() - ratio.log(), advantages=adv * mask)
    batch.extras.update({k: rows(v) if k != "correct" else torch.as_tensor(v, dtype=torch.float64)
                         for k, v in extras.items()})
    return logp, batch


def token_mean_backward(out, logp, batch):
    """Backward through ``out.loss`` if set, else the token mean of ``out.token_loss``; (loss, d loss/d logp)."""
    mask = batch.mask
    loss = out.loss if out.loss is not None else (out.token_loss * mask).sum() / mask.sum().clamp_min(1)
    loss.backward()
    return loss.detach(), logp.grad
