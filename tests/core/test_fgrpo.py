"""F-GRPO (spec §11): phase advantages on their own tokens, the worked example, edge cases."""
import math

import pytest
import torch

from .helpers import build_batch, close
from polo.core.advantages.fgrpo import FGRPO, phase_advantages
from polo.core.registry import ADVANTAGES

# spec §11 (e): R_slate, R_rank of a group of 4
R_SLATE = [0.5, 1.0, 0.5, 0.0]
R_RANK = [0.6131, 0.5, 1.0, 0.0]


def span_batch(rewards, tags, group=None, lengths=None):
    """Rows of ``len(tags[i])`` tokens (``lengths`` valid) with span tags and phase rewards [N, S]."""
    T = max(map(len, tags))
    lengths = lengths or [len(t) for t in tags]
    mask = (torch.arange(T)[None] < torch.tensor(lengths)[:, None]).long()
    batch = build_batch([[sum(r)] for r in rewards], group, mask)
    batch.extras["span_tag"] = torch.tensor([t + [-1] * (T - len(t)) for t in tags])
    batch.extras["span_rewards"] = torch.tensor(rewards, dtype=torch.float64)
    return batch


def test_worked_example_phase_advantages():
    adv = phase_advantages(torch.tensor([R_SLATE, R_RANK], dtype=torch.float64).T, torch.zeros(4, dtype=torch.long))
    close(adv[:, 0], [0.0, 0.5, 0.0, -0.5])
    close(adv[:, 1], [0.0849, -0.0283, 0.4717, -0.5283])


def test_worked_example_tokens_and_joint_contrast():
    # each response: 2 slate tokens, 2 rank tokens, one untagged EOS
    tags = [[0, 0, 1, 1, -1]] * 4
    batch = span_batch([list(r) for r in zip(R_SLATE, R_RANK)], tags)
    adv = FGRPO(weights=[1.0, 1.0])(batch).advantages
    close(adv[1], [0.5, 0.5, -0.0283, -0.0283, 0.0])  # rollout 2: good slate, below-average ranking
    close(adv[2], [0.0, 0.0, 0.4717, 0.4717, 0.0])
    # joint-reward GRPO would give every token of rollout 3 (index 2) the same 0.4717 (spec: "rollout 2")
    joint = ADVANTAGES.build({"name": "dr_grpo"})(build_batch([[s + r] for s, r in zip(R_SLATE, R_RANK)]))
    close(joint.advantages[2], [0.4717])
    result = FGRPO()(batch)
    assert result.diagnostics["fgrpo/untagged_token_frac"] == pytest.approx(0.2)
    assert result.diagnostics["fgrpo/opposed_frac"] == pytest.approx(0.25)  # rollout 2 only


def test_lambda_scales_the_rank_phase_only():
    tags = [[0, 1]] * 4
    batch = span_batch([list(r) for r in zip(R_SLATE, R_RANK)], tags)
    adv = FGRPO(weights=[1.0, 2.0])(batch).advantages
    close(adv[:, 0], [0.0, 0.5, 0.0, -0.5])
    close(adv[:, 1], [0.1696, -0.0566, 0.9434, -1.0566])  # 2 × (0.0848, −0.0283, 0.4717, −0.5283)


def test_all_equal_group_single_sample_and_masked_tokens():
    tags = [[0, 1, 1], [0, 1, 1], [0, 0, 1]]
    batch = span_batch([[0.3, 0.7], [0.3, 0.7], [0.9, 0.2]], tags, group=[0, 0, 1], lengths=[3, 2, 3])
    adv = FGRPO()(batch).advantages
    assert torch.equal(adv[:2], torch.zeros(2, 3, dtype=adv.dtype))  # equal group: exactly 0; padding 0
    close(adv[2], [0.9, 0.9, 0.2])  # a lone sample keeps its raw phase rewards (GRPO's rule)


def test_bad_inputs_and_config():
    tags = [[0, 1]] * 2
    batch = span_batch([[0.1, math.nan], [0.2, 0.3]], tags)
    with pytest.raises(ValueError, match="NaN"):
        FGRPO()(batch)
    batch = span_batch([[0.1, 0.2], [0.2, 0.3]], [[0, 2], [0, 1]])
    with pytest.raises(ValueError, match="-1..1"):
        FGRPO()(batch)
    batch = span_batch([[0.1, 0.2], [0.2, 0.3]], tags)
    with pytest.raises(ValueError, match="3 values"):
        FGRPO(weights=[1.0, 1.0, 1.0])(batch)
    with pytest.raises(ValueError, match="finite"):
        FGRPO(weights=[1.0, math.inf])
    del batch.extras["span_tag"]
    with pytest.raises(ValueError, match="span_tag"):
        FGRPO()(batch)
    assert FGRPO().needs() == {"span_tag", "span_rewards"}


# ---- mutation-testing kills (docs/mutation.md)
def test_phase_advantages_keep_groups_and_phases_apart():
    # three groups of two, two phases: each (group, phase) cell is centred on its own mean
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0], [2.0, 0.0], [0.0, 0.0]])
    close(phase_advantages(rewards, torch.tensor([0, 0, 1, 1, 2, 2])),
          [[0.5, -0.5], [-0.5, 0.5], [0.5, 0.5], [-0.5, -0.5], [1.0, 0.0], [-1.0, 0.0]])
