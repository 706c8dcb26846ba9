"""Shared test helpers: batches from lists, float comparisons at a 1e-4 tolerance."""
import torch

from polo.core.batch import RolloutBatch


def build_batch(rewards, group=None, mask=None, **fields) -> RolloutBatch:
    """A RolloutBatch in float64 from lists; ``mask`` defaults to one valid token per row."""
    rewards = torch.as_tensor(rewards, dtype=torch.float64)
    B = rewards.shape[0]
    mask = torch.ones(B, 1) if mask is None else torch.as_tensor(mask)
    T = mask.shape[1]
    group = torch.zeros(B, dtype=torch.long) if group is None else torch.as_tensor(group)
    fields = {k: torch.as_tensor(v, dtype=torch.float64) for k, v in fields.items()}
    return RolloutBatch(
        prompt_ids=torch.zeros(B, 1, dtype=torch.long),
        prompt_mask=torch.ones(B, 1, dtype=torch.long),
        response_ids=torch.zeros(B, T, dtype=torch.long),
        response_mask=mask.long(),
        group=group,
        rewards=rewards,
        **fields,
    )


def close(actual, expected, atol=1e-4):
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


def seq_adv(estimator, rewards, group=None, **extras):
    """The per-sample advantage of a sequence-level estimator on one-token rows (extras as float64)."""
    batch = build_batch(rewards, group)
    batch.extras.update({k: torch.as_tensor(v, dtype=torch.float64) for k, v in extras.items()})
    return estimator(batch).advantages[:, 0]


def length_batch(rewards, lengths, group=None, width=None):
    """One row per sample with ``lengths[i]`` valid tokens (right-padded to ``width``)."""
    width = width or max(lengths)
    mask = (torch.arange(width)[None] < torch.tensor(lengths)[:, None]).long()
    return build_batch(rewards, group, mask=mask)
