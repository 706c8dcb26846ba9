import math

import pytest
import torch

from polo.core.advantages.gdpo import (GD2PO, GDPO, component_advantages, conflicted, consensus, order_changes,
                                      whiten_rows)
from polo.core.batch import RolloutBatch

from .helpers import build_batch, close

CORRECT = [1, 1, 0, 0, 1, 0, 0, 0]
LENGTH = [0.5, 0.9, 0.6, 0.1, 0.5, 0.5, 0.5, 0.1]
GROUP = [0, 0, 0, 0, 1, 1, 1, 1]
ALL_SCORED = torch.ones(8, dtype=torch.bool)


def example(group=GROUP, mask=None, order=None):
    rows = list(range(8)) if order is None else order
    rewards = [[CORRECT[i], LENGTH[i]] for i in rows]
    return build_batch(rewards, [group[i] for i in rows] if order is not None else group, mask=mask)


def test_worked_example_components_and_gdpo():
    batch = example()
    comp = component_advantages(batch.rewards, torch.ones(8, 2, dtype=torch.bool), batch.group, 1e-6)
    close(comp[:, 0], [0.8660, 0.8660, -0.8660, -0.8660, 1.5, -0.5, -0.5, -0.5])
    close(comp[:, 1], [-0.0757, 1.1350, 0.2270, -1.2863, 0.5, 0.5, 0.5, -1.5])
    close(comp.sum(-1), [0.7904, 2.0010, -0.6390, -2.1523, 2.0, 0.0, 0.0, -2.0])
    close(GDPO()(batch).advantages[:, 0], [0.4975, 1.2595, -0.4022, -1.3547, 1.2588, 0.0, 0.0, -1.2588])


def test_worked_example_gd2po_hard_and_snr():
    batch = example()
    comp = GDPO().components(batch)
    assert conflicted(comp).long().tolist() == [1, 0, 1, 0, 0, 1, 1, 0]
    keep, scale, diag = GD2PO().selection(comp, batch.group, ALL_SCORED)
    close(scale, [0.5] * 8)
    assert diag == {"gd2po/conflict_frac": 0.5, "gd2po/drop_frac": 0.5}
    hard = GD2PO()(batch).advantages[:, 0]
    close(hard, [0, 0.8659, 0, -0.8981, 0.8655, 0, 0, -0.8334])
    assert hard[~keep].eq(0).all()  # dropped rows exactly 0
    close(consensus(comp), [0.8393, 1, -0.5846, -1, 1, 0, 0, -1])
    keep, scale, _ = GD2PO(variant="snr", tau=0.8).selection(comp, batch.group, ALL_SCORED)
    assert (~keep).long().tolist() == [0, 0, 1, 0, 0, 1, 1, 0]
    close(scale, [0.75] * 4 + [0.5] * 4)
    close(GD2PO(variant="snr")(batch).advantages[:, 0], [0.3713, 1.0498, 0, -1.2779, 0.6756, 0, 0, -0.8189])


def test_drop_frac_per_component_names_the_components_in_the_dropped_conflicts():
    # the worked example plus a length column that no rollout reaches (0 everywhere, as overlong on addition)
    batch = build_batch([[CORRECT[i], LENGTH[i], 0.0] for i in range(8)], GROUP)
    batch.reward_names = ("correct", "length", "overlong")
    diag = GD2PO()(batch).diagnostics
    assert diag["gd2po/drop_frac"] == 0.5  # rows 0, 2, 5, 6: correctness and length disagree in each
    assert diag["gd2po/drop_frac/correct"] == diag["gd2po/drop_frac/length"] == 0.5
    assert diag["gd2po/drop_frac/overlong"] == 0.0
    batch.rewards[:, 2] = torch.tensor([0.0, -0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    # row 1 (correct, long) now pays a length penalty, so in group 0 the term is −1.5 there and +0.5 elsewhere:
    # it takes part in the conflict of every row of group 0 (rows 1 and 3 are now conflicted too)
    diag = GD2PO()(batch).diagnostics
    assert diag["gd2po/drop_frac/overlong"] == 0.5 and diag["gd2po/drop_frac"] == 6 / 8


def test_token_weighted_and_sample_whitening():
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 1], [1, 0, 0], [1, 1, 0]])
    batch = example(mask=mask)
    total = GDPO().components(batch).sum(-1)
    tokens = total[:, None].expand(-1, 3)[mask.bool()]  # each row counted once per token
    expected = (total - tokens.mean()) / (tokens.var() + 1e-8).sqrt()  # unbiased variance over the tokens
    close(GDPO()(batch).advantages, expected[:, None] * mask)
    by_sample = (total - total.mean()) / (total.std() + 1e-4)  # TRL: samples, unbiased std, eps 1e-4
    close(GDPO(whiten="sample")(batch).advantages, by_sample[:, None] * mask)
    close(GDPO(whiten="none")(batch).advantages, total[:, None] * mask)


def test_reward_weights_scale_the_components():
    batch = example()
    batch.reward_weights = torch.tensor([2.0, 0.5], dtype=torch.float64)
    comp = GDPO().components(batch)
    close(GDPO(whiten="none")(batch).advantages[:, 0], 2 * comp[:, 0] + 0.5 * comp[:, 1])


def test_missing_and_nan_rewards_are_left_out_of_their_column():
    batch = build_batch([[1.0, 0.2], [0.0, 0.9], [0.5, 0.4], [0.0, 0.0]])
    batch.extras["reward_present"] = torch.tensor([[True, True], [True, True], [True, True], [True, False]])
    comp = GDPO().components(batch)
    z = torch.tensor([1.0, 0.0, 0.5, 0.0], dtype=torch.float64)
    close(comp[:, 0], ((z - z.mean()) / (z.std() + 1e-6)).tolist())  # column 0 is present everywhere
    other = build_batch([[1.0, 0.2], [0.0, 0.9], [0.5, 0.4], [0.0, 123.0]])
    other.extras["reward_present"] = batch.extras["reward_present"]
    close(GDPO().components(other), comp)  # an absent value is never read
    z = torch.tensor([0.2, 0.9, 0.4], dtype=torch.float64)
    close(comp[:, 1], ((z - z.mean()) / (z.std() + 1e-6)).tolist() + [0.0])  # absent: 0 normalized advantage
    nan_batch = build_batch([[1.0, 0.2], [0.0, 0.9], [0.5, 0.4], [0.0, math.nan]])
    close(GDPO().components(nan_batch), comp)  # a NaN reward is a missing one
    assert torch.isfinite(GD2PO()(nan_batch).advantages).all()


def test_degenerate_groups():
    equal = build_batch([[1.0, 0.5]] * 4)
    assert GDPO()(equal).advantages.eq(0).all() and GD2PO()(equal).advantages.eq(0).all()
    lone = build_batch([[1.0, 0.5], [0.0, 0.2], [1.0, 0.1]], group=[0, 1, 1])
    comp = GDPO().components(lone)
    close(comp[0], [1.0, 0.5])  # a single rollout keeps its raw rewards (GRPO's lone-sample rule)
    assert torch.isfinite(GDPO()(lone).advantages).all()


def test_all_dropped_or_one_kept_token_gives_zero():
    batch = build_batch([[1.0, 0.0], [0.0, 1.0]])  # both rows conflicted
    out = GD2PO()(batch)
    assert out.advantages.eq(0).all() and out.diagnostics["gd2po/drop_frac"] == 1.0
    one = build_batch([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]], mask=[[1, 1], [1, 1], [1, 0], [1, 1]])
    keep, _, _ = GD2PO().selection(GDPO().components(one), one.group, torch.ones(len(one.group), dtype=torch.bool))
    assert keep.tolist() == [False, False, True, True]
    assert GD2PO()(one).advantages[:2].eq(0).all()
    single_token = build_batch([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], mask=[[1], [1], [1]])
    assert GD2PO()(single_token).advantages.eq(0).all()  # one kept token: x − mean = 0


def test_groups_are_independent_and_masked_tokens_are_zero():
    order = [4, 0, 5, 1, 6, 2, 7, 3]
    out = GD2PO(variant="snr")(example(order=order)).advantages[:, 0]
    close(out, torch.tensor([0.3713, 1.0498, 0, -1.2779, 0.6756, 0, 0, -0.8189], dtype=torch.float64)[order])
    mask = [[1, 0]] * 7 + [[0, 0]]
    out = GDPO()(example(mask=mask)).advantages
    assert out[:, 1].eq(0).all() and out[7].eq(0).all()


def test_bad_present_shape():
    batch = example()
    batch.extras["reward_present"] = torch.ones(8, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"reward_present has shape \(8, 3\), rewards \(8, 2\)"):
        GDPO()(batch)


def unscored_example():
    """Rewards [1, 0, None, 1 | 0, 0, 1, 1]: one reward, two groups of four, the third row scored by nothing."""
    batch = build_batch([[1.0], [0.0], [0.0], [1.0], [0.0], [0.0], [1.0], [1.0]], GROUP)
    batch.extras["reward_present"] = torch.tensor([True, True, False, True, True, True, True, True])[:, None]
    return batch


@pytest.mark.parametrize("whiten", ["sample", "token"])
def test_a_row_no_reward_scored_gets_zero_and_moves_no_other_row(whiten):
    # group z-scores: [1/√3, −2/√3, ·, 1/√3 | −√3/2, −√3/2, √3/2, √3/2] (unbiased std); the seven scored
    # values have mean 0 and unbiased std √(5/6), so 0.5774/0.9129 = 0.632, −1.155/0.9129 = −1.265,
    # 0.866/0.9129 = 0.949
    # (TRL's normalize_then_sum). Counting the unscored row as a 0 would give 0.683 / −1.025 instead.
    adv = GDPO(whiten=whiten)(unscored_example()).advantages[:, 0]
    close(adv, [0.6325, -1.2649, 0.0, 0.6325, -0.9487, -0.9487, 0.9487, 0.9487], atol=2e-4)
    assert adv[2] == 0


def test_gd2po_keep_ratio_counts_the_scored_rows_only():
    keep, scale, _ = GD2PO().selection(torch.zeros(4, 1), torch.tensor([0, 0, 0, 0]),
                                       torch.tensor([True, True, False, True]))
    assert keep.tolist() == [True, True, False, True]
    close(scale, [1.0] * 4)  # 3 of 3 scored rows kept, not 3 of 4
    assert GD2PO()(unscored_example()).advantages[2].eq(0).all()


def test_order_changes_counts_the_pairs_decoupling_reorders():
    # the worked example: S orders both groups as the summed reward does (group 1's tied pair is not counted)
    assert GDPO()(example()).diagnostics["gdpo/order_changes"] == 0.0
    # correct [1, 0, 0], length [0, 0.9, 0.8]: summed 1.0 > 0.9 > 0.8, but the z-scores give
    # S = 1.1547 - 1.1487 = 0.0060 < S_1 = -0.5774 + 0.6757 = 0.0983: pair (0, 1) flips, (0, 2) and (1, 2) agree
    batch = build_batch([[1.0, 0.0], [0.0, 0.9], [0.0, 0.8]], [0, 0, 0])
    assert GDPO()(batch).diagnostics["gdpo/order_changes"] == pytest.approx(1 / 3)
    # pairs of different groups are never compared; equal values on both sides are no pair
    assert order_changes(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]), torch.tensor([0, 1])) == 0.0
    assert order_changes(torch.tensor([2.0, 2.0]), torch.tensor([1.0, 1.0]), torch.tensor([0, 0])) == 0.0
    assert order_changes(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 1.0]), torch.tensor([0, 0])) == 1.0


# ---- mutation-testing kills


def test_three_groups_keep_their_component_cells_apart_and_eps_reaches_the_std():
    # two rows per group, so every component's z-score is ±(d/2)/(d/√2) = ±1/√2 = ±0.7071 whatever its values;
    # with three groups a (group, component) cell id inv/K + k would merge group 0's k=1 with group 2's k=0
    batch = build_batch([[0.0, 0.0], [1.0, 10.0], [0.0, 0.0], [1.0, 1.0], [5.0, 0.0], [6.0, 1.0]], [0, 0, 1, 1, 2, 2])
    close(GDPO().components(batch), [[-0.7071, -0.7071], [0.7071, 0.7071]] * 3)
    # eps = 1: values 0 and 2 have mean 1 and unbiased std √2, so ±1/(√2 + 1) = ±0.4142
    two = build_batch([[0.0], [2.0]])
    close(GDPO(eps=1.0).components(two)[:, 0], [-0.4142, 0.4142])


def test_a_component_exactly_at_the_sign_tolerance_is_not_signed():
    # +1e-8 is not positive and −1e-8 not negative (strictly beyond SIGN_TOL); 2e-8 is
    comp = torch.tensor([[1e-8, -1.0], [1.0, -1e-8], [2e-8, -1.0]], dtype=torch.float64)
    assert conflicted(comp).tolist() == [False, False, True]


def test_consensus_adds_the_tolerance_to_the_denominator():
    # [1e-8, 1e-8]: 2e-8 / (2e-8 + 1e-8) = 2/3; [3, −1]: 2 / (4 + 1e-8) = 0.5
    close(consensus(torch.tensor([[1e-8, 1e-8], [3.0, -1.0]], dtype=torch.float64)), [2 / 3, 0.5], atol=1e-6)


def test_order_changes_edge_cases():
    # an empty batch has no pair
    assert order_changes(torch.zeros(0), torch.zeros(0), torch.zeros(0, dtype=torch.long)) == 0.0
    # a difference of exactly SIGN_TOL is a tie: no pair is ranked
    assert order_changes(torch.tensor([0.0, 1e-8], dtype=torch.float64), torch.zeros(2, dtype=torch.float64),
                         torch.tensor([0, 0])) == 0.0
    # pair (0, 1) is tied on both sides and not counted; (0, 2) and (1, 2) flip: 2 of 2
    assert order_changes(torch.tensor([0.0, 0.0, 1.0]), torch.tensor([0.0, 0.0, -1.0]), torch.tensor([0, 0, 0])) == 1.0
    # groups of 3 and 1: group 0 agrees (0/3); the lone row 3 (which orders oppositely to rows 0, 1) pairs with
    # nothing, neither with the padding of its group's block
    assert order_changes(torch.tensor([0.0, 1.0, 2.0, 5.0]), torch.tensor([0.0, 1.0, 2.0, -5.0]),
                         torch.tensor([0, 0, 0, 1])) == 0.0


def test_order_changes_metric_reads_the_scored_rewards_only():
    # unscored_example, group 0: S = [1/√3, −2/√3, 0, 1/√3], summed = [1, 0, 0, 1]: of its 5 ranked pairs only
    # (1, 2) flips (S_1 < S_2, summed tied); group 1 orders as its rewards (4 ranked pairs): 1/9
    assert GDPO()(unscored_example()).diagnostics["gdpo/order_changes"] == pytest.approx(1 / 9)


def test_whiten_rows_by_hand():
    ones = torch.ones(2, 1, dtype=torch.float64)
    both = torch.tensor([True, True])
    # token, exactly two kept tokens: mean 2, unbiased var 2, so ±1/√2 = ±0.7071
    close(whiten_rows(torch.tensor([1.0, 3.0], dtype=torch.float64), ones, both, "token")[:, 0], [-0.7071, 0.7071])
    # sample: a kept row without tokens is left out of the statistics (mean 2, std √2 over rows 0, 1):
    # ±1/(1.414214 + 1e-4) = ±0.707057
    mask = torch.tensor([[1.0], [1.0], [0.0]], dtype=torch.float64)
    close(whiten_rows(torch.tensor([1.0, 3.0, 100.0], dtype=torch.float64), mask, torch.ones(3, dtype=torch.bool),
                      "sample")[:, 0], [-0.707057, 0.707057, 0.0], atol=1e-6)
    # sample eps is 1e-4: [0, 2e-4] has std 1.414214e-4, so ±1e-4/2.414214e-4 = ±0.414214
    close(whiten_rows(torch.tensor([0.0, 2e-4], dtype=torch.float64), ones, both, "sample")[:, 0],
          [-0.414214, 0.414214], atol=1e-6)
    # sample, one kept row: x − mean = 0
    assert whiten_rows(torch.tensor([5.0, 7.0], dtype=torch.float64), ones, torch.tensor([True, False]),
                       "sample").eq(0).all()


def test_integer_rewards_and_float32_weights_take_the_masks_dtype():
    ref = build_batch([[0], [2]])
    batch = RolloutBatch(prompt_ids=ref.prompt_ids, prompt_mask=ref.prompt_mask, response_ids=ref.response_ids,
                         response_mask=ref.response_mask, group=ref.group, rewards=torch.tensor([[0], [2]]),
                         reward_weights=torch.ones(1))
    out = GDPO(whiten="none")(batch)
    # mask float32 (integer rewards): (x − 1)/(√2 + 1e-6) = ±0.7071 in float32
    assert out.advantages.dtype == torch.float32
    close(out.advantages[:, 0], [-0.7071, 0.7071])
    assert out.diagnostics["gdpo/order_changes"] == 0.0
    # float64 rewards with float32 weights: the weights follow the components' dtype
    batch = example()
    batch.reward_weights = torch.tensor([2.0, 0.5])
    comp = GDPO().components(batch)
    close(GDPO(whiten="none")(batch).advantages[:, 0], 2 * comp[:, 0] + 0.5 * comp[:, 1])


def test_gd2po_selection_edges():
    # snr at tau 0 drops nothing, not even a conflicted row with consensus exactly 0
    comp = torch.tensor([[1.0, -1.0], [2.0, -1.0]], dtype=torch.float64)
    keep, _, diag = GD2PO(variant="snr", tau=0.0).selection(comp, torch.tensor([0, 0]), torch.tensor([True, True]))
    assert keep.tolist() == [True, True] and diag["gd2po/drop_frac"] == 0.0
    # a group with one scored row that is kept keeps ratio 1/1
    _, scale, _ = GD2PO().selection(torch.tensor([[1.0, 1.0]]), torch.tensor([0]), torch.tensor([True]))
    assert scale.tolist() == [1.0]
    # one conflicted row: 1 of 1 conflicted and dropped
    _, _, diag = GD2PO().selection(torch.tensor([[1.0, -1.0]]), torch.tensor([0]), torch.tensor([True]), ("a", "b"))
    assert diag == {"gd2po/conflict_frac": 1.0, "gd2po/drop_frac": 1.0, "gd2po/drop_frac/a": 1.0,
                    "gd2po/drop_frac/b": 1.0}


def test_an_infinite_reward_counts_as_missing_and_leaves_the_other_rows_finite():
    # component 1 of row 0 is +inf (then -inf): it is not present, so the advantages are those of the batch with that
    # reward missing (found by mutation triage: nan_to_num turned inf into 1.8e308 and the z-score into NaN)
    for bad in (math.inf, -math.inf):
        batch = build_batch([[1.0, bad], [0.0, 0.2], [1.0, 0.3], [0.0, 0.1]])
        missing = build_batch([[1.0, 0.0], [0.0, 0.2], [1.0, 0.3], [0.0, 0.1]])
        missing.extras["reward_present"] = torch.tensor([[True, False], [True, True], [True, True], [True, True]])
        adv = GDPO()(batch).advantages
        assert torch.isfinite(adv).all()
        close(adv, GDPO()(missing).advantages)

