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


def test_missing_inputs_list_the_extras_or_say_none():
    batch = span_batch([[0.1, 0.2], [0.2, 0.3]], [[0, 1]] * 2)
    del batch.extras["span_tag"]
    with pytest.raises(ValueError, match=r"from a task with tagged_spans such as slate_rank\); "
                                         r"extras: \['span_rewards'\]$"):
        FGRPO()(batch)
    del batch.extras["span_rewards"]
    with pytest.raises(ValueError, match=r"^advantage fgrpo needs the inputs .* extras: none$"):
        FGRPO()(batch)


def test_malformed_span_inputs_are_named_with_shape_dtype_and_range():
    def bad(**extras):
        batch = span_batch([[0.1, 0.2], [0.2, 0.3]], [[0, 1]] * 2)
        batch.extras.update(extras)
        return batch
    with pytest.raises(ValueError, match=r"^advantage fgrpo: span_tag must be an integer \[N, T\] = \[2, 2\] tensor, "
                                         r"got \(2, 2\) torch\.float32$"):
        FGRPO()(bad(span_tag=torch.tensor([[0.0, 1.0]] * 2)))
    with pytest.raises(ValueError, match=r"^advantage fgrpo: span_tag must be .* got \(2, 3\) torch\.int64$"):
        FGRPO()(bad(span_tag=torch.tensor([[0, 1, 1]] * 2)))
    with pytest.raises(ValueError, match=r"^advantage fgrpo: span_rewards must be \[N, S\] with N = 2, got \(2,\)$"):
        FGRPO()(bad(span_rewards=torch.tensor([0.1, 0.2], dtype=torch.float64)))
    with pytest.raises(ValueError, match=r"^advantage fgrpo: span_tag values must lie in -1\.\.1 \(S = 2 phases\), "
                                         r"got -2\.\.1$"):
        FGRPO()(bad(span_tag=torch.tensor([[-2, 1], [0, 1]])))


def test_float32_phase_rewards_are_centred_in_the_masks_float64():
    # one group of three, phase 0 rewards [1, 0, 0]: mean 1/3, A = [2/3, −1/3, −1/3] to float64 precision
    batch = span_batch([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]], [[0, 1]] * 3)
    batch.extras["span_rewards"] = batch.extras["span_rewards"].float()
    adv = FGRPO()(batch).advantages
    torch.testing.assert_close(adv[:, 0], torch.tensor([2 / 3, -1 / 3, -1 / 3], dtype=torch.float64),
                               atol=1e-12, rtol=0)


def test_untagged_fraction_counts_valid_tokens_only():
    # row 0: 3 valid tokens, the last untagged; row 1: 1 valid token, 2 padding (untagged): 1 of 4 valid tokens
    batch = span_batch([[0.1, 0.2], [0.2, 0.3]], [[0, 1, -1], [0, -1, -1]], lengths=[3, 1])
    assert FGRPO()(batch).diagnostics["fgrpo/untagged_token_frac"] == 0.25
    one = span_batch([[0.1, 0.2]], [[-1]])  # a single valid token, untagged
    assert FGRPO()(one).diagnostics["fgrpo/untagged_token_frac"] == 1.0


def test_opposed_needs_both_signs_beyond_1e_8():
    # lone samples keep their raw phase rewards as advantages; ±1e-8 itself counts as no sign
    batch = span_batch([[1e-8, -1.0], [-1e-8, 1.0], [1.0, -1.0]], [[0, 1]] * 3, group=[0, 1, 2])
    assert FGRPO()(batch).diagnostics["fgrpo/opposed_frac"] == pytest.approx(1 / 3)  # row 2 only


def test_bfloat16_rewards_give_bfloat16_advantages():
    batch = span_batch([[1.0, 0.0], [0.0, 0.5]], [[0, 1]] * 2)
    batch.rewards = batch.rewards.bfloat16()  # the mask follows the rewards' dtype
    adv = FGRPO(weights=[1.0, 0.5])(batch).advantages
    assert adv.dtype == torch.bfloat16
    close(adv.float(), [[0.5, -0.125], [-0.5, 0.125]])  # phase 0: ±0.5; phase 1: 0.5·(∓0.25)


def test_a_weight_is_applied_at_the_batchs_precision():
    # mask float64 (build_batch): λ = 0.3 scales the rank phase by 0.3 itself, not by float32's 0.30000001192
    # (on an advantage of 0.4717 that is 5.6e-9 off, far above float64's 1e-12)
    batch = span_batch([list(r) for r in zip(R_SLATE, R_RANK)], [[0, 1]] * 4)
    one, scaled = FGRPO(weights=[1.0, 1.0])(batch).advantages, FGRPO(weights=[1.0, 0.3])(batch).advantages
    assert scaled.dtype == torch.float64
    close(scaled[:, 1], 0.3 * one[:, 1], atol=1e-12)
