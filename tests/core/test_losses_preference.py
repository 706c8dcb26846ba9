"""DPO, IPO and MNPO/INPO on (chosen, rejected) pairs: hand-computed values, the MNPO worked example, ties,
masking, NaN behaviour and micro-batch invariance."""
import math

import pytest
import torch

from polo.core.losses.preference import DPO, IPO, MNPO, Pairs
from polo.core.registry import POLICY_LOSSES, ConfigError
from polo.train.config import load_recipe

from .helpers import build_batch, close


def pair_batch(seq, ref, chosen, group=None, lengths=None, history=None, pad=0.0, pair_valid=None):
    """Rows whose token log-probs are ``seq[i] / lengths[i]`` on their ``lengths[i]`` tokens (so the sequence
    sum is ``seq[i]``) and ``pad`` on the padding; the same for ``ref``. Returns (leaf sums, logp, batch)."""
    B = len(seq)
    lengths = lengths or [1] * B
    group = group if group is not None else [i // 2 for i in range(B)]
    width = max(lengths)
    mask = (torch.arange(width)[None] < torch.tensor(lengths)[:, None]).double()
    s = torch.tensor(seq, dtype=torch.float64, requires_grad=True)
    n = torch.tensor(lengths, dtype=torch.float64)[:, None]
    logp = torch.where(mask > 0, s[:, None] / n, pad)
    ref_logp = torch.where(mask > 0, torch.tensor(ref, dtype=torch.float64)[:, None] / n, pad)
    batch = build_batch([0.0] * B, group=group, mask=mask, old_logp=logp.detach(), ref_logp=ref_logp)
    batch.extras["chosen"] = torch.tensor(chosen, dtype=torch.float64)
    if history is not None:
        batch.extras["history_logp"] = torch.tensor(history, dtype=torch.float64)
    if pair_valid is not None:
        batch.extras["pair_valid"] = torch.tensor(pair_valid, dtype=torch.float64)
    return s, logp, batch


def sigmoid(x):
    return 1 / (1 + math.exp(-x))


def test_dpo_hand_computed_value_gradient_and_metrics():
    # h = (−10 + 11) − (−14 + 13) = 2; ℓ = −log σ(0.1·2)
    s, logp, batch = pair_batch([-10.0, -14.0], [-11.0, -13.0], [1.0, 0.0], lengths=[2, 3])
    out = DPO(beta=0.1)(logp, batch)
    close(out.loss.detach(), math.log1p(math.exp(-0.2)))
    out.loss.backward()
    g = 0.1 * sigmoid(-0.2)  # −∂ℓ/∂s_w = ∂ℓ/∂s_l = β σ(−βh)
    close(s.grad, [-g, g])
    close(out.metrics["reward_accuracy"], 1.0)
    close(out.metrics["reward_margin"], 0.2)
    close(out.metrics["chosen_log_ratio"], 1.0)
    close(out.metrics["rejected_log_ratio"], -1.0)
    close((out.token_loss * batch.mask).sum(), out.loss.detach())


def test_pairs_in_any_row_order_and_group_ids():
    # pair 7: rejected row first; pair 3: chosen first; the second pair's h = (−2 + 1) − (−1 + 3) = −3
    s, logp, batch = pair_batch([-14.0, -2.0, -1.0, -10.0], [-13.0, -1.0, -3.0, -11.0], [0.0, 1.0, 0.0, 1.0],
                                group=[7, 3, 3, 7])
    out = DPO(beta=0.1)(logp, batch)
    close(out.loss.detach(), (math.log1p(math.exp(-0.2)) + math.log1p(math.exp(0.3))) / 2)
    close(out.metrics["reward_accuracy"], 0.5)


def test_ipo_sum_is_the_papers_and_mean_is_trls():
    s, logp, batch = pair_batch([-10.0, -14.0], [-11.0, -13.0], [1.0, 0.0], lengths=[2, 4])
    close(IPO(tau=0.1)(logp, batch).loss.detach(), (2 - 5) ** 2)
    # token means: h = (−5 + 5.5) − (−3.5 + 3.25) = 0.75
    out = IPO(tau=0.1, reduction="mean")(logp, batch)
    close(out.loss.detach(), (0.75 - 5) ** 2)
    out.loss.backward()
    close(s.grad, [2 * (0.75 - 5) / 2, -2 * (0.75 - 5) / 4])


# spec §15(e): log π(y_w), log π(y_l) = −10, −14; ref −11, −13; history 1: −10.5, −13; history 2: −12, −12
MNPO_ROWS = dict(seq=[-10.0, -14.0], ref=[-11.0, -13.0], chosen=[1.0, 0.0], history=[[-10.5, -12.0], [-13.0, -12.0]])


@pytest.mark.parametrize("weights, eta, u, loss", [
    ([1.0, 0.0], 0.5, 1.6667, 0.4444),   # INPO, or MNPO with the most recent opponent only
    ([0.5, 0.5], 0.5, 2.5000, 2.2500),
    ([1.0, 0.0], 0.0075, 1.6667, 4225.0),  # the default η: target 1/(2η) ≈ 66.67
])
def test_mnpo_worked_example(weights, eta, u, loss):
    s, logp, batch = pair_batch(**MNPO_ROWS)
    out = MNPO(weights=weights, eta=eta, ratio=1 / 3)(logp, batch)
    close(out.metrics["mnpo_u"], u)
    close(out.loss.detach(), loss, atol=1e-4 * max(1.0, loss))


def test_inpo_is_mnpo_with_one_history_model():
    s, logp, batch = pair_batch(**{**MNPO_ROWS, "history": [[-10.5], [-13.0]]})
    close(MNPO(weights=[1.0], eta=0.5)(logp, batch).loss.detach(), 0.4444)


def test_shipped_mnpo_differs_from_inpo_once_two_distinct_iterates_are_held():
    # the recipes' losses on §15(e): Δ_θ = 4, Δ_ref = 2, Δ_1 = 2.5, Δ_2 = 0 (two distinct iterates).
    # inpo: u = 4 − 2/3 − (2/3)·2.5 = 5/3. mnpo, λ = (0.667, 0.333): Δ_mix = 0.667·2.5 = 1.6675,
    # u = 4 − 2/3 − (2/3)·1.6675 = 2.221667, |Δ_mix − Δ_1| = 0.8325; ℓ = (u − 1/(2·0.0075))²
    mnpo = POLICY_LOSSES.build(load_recipe("mnpo", []).policy_loss)
    inpo = POLICY_LOSSES.build(load_recipe("inpo", []).policy_loss)
    _, logp, batch = pair_batch(**MNPO_ROWS)
    out = mnpo(logp, batch)
    close(out.metrics["mnpo_u"], 2.221667, atol=1e-6)
    close(out.loss.detach(), (2.221667 - 200 / 3) ** 2, atol=1e-3)
    close(out.metrics["mnpo_mix_gap"], 0.8325)
    close(out.metrics["mnpo_distinct_iterates"], 2.0)
    _, logp, batch = pair_batch(**{**MNPO_ROWS, "history": [[-10.5], [-13.0]]})
    out = inpo(logp, batch)
    close(out.metrics["mnpo_u"], 5 / 3)
    close(out.loss.detach(), 4225.0)
    close(out.metrics["mnpo_mix_gap"], 0.0)


def test_mnpo_mix_gap_is_zero_while_the_history_holds_one_policy():
    # both slots unfilled (the initial policy): the mix is the most recent iterate, whatever the weights
    _, logp, batch = pair_batch(**{**MNPO_ROWS, "history": [[-10.5, -10.5], [-13.0, -13.0]]})
    out = MNPO(weights=[0.667, 0.333])(logp, batch)
    close(out.metrics["mnpo_mix_gap"], 0.0)
    close(out.metrics["mnpo_distinct_iterates"], 1.0)


def test_mnpo_zero_weights_mix_uniformly_and_history_width_is_checked():
    s, logp, batch = pair_batch(**MNPO_ROWS)
    close(MNPO(weights=[0.0, 0.0], eta=0.5)(logp, batch).metrics["mnpo_u"], 2.5)  # as [0.5, 0.5]
    with pytest.raises(ValueError, match=r"history_logp must be \[B, 3\]"):
        MNPO(weights=[1.0, 0.0, 0.0])(logp, batch)
    with pytest.raises(ConfigError, match="non-negative"):
        POLICY_LOSSES.build({"name": "mnpo", "weights": [1.0, -1.0]})


def test_tied_pair_contributes_nothing_but_counts_in_the_mean():
    s, logp, batch = pair_batch([-10.0, -14.0, -3.0, -3.0], [-11.0, -13.0, -2.0, -2.0], [1.0, 0.0, 0.0, 0.0],
                                pair_valid=[1.0, 1.0, 0.0, 0.0])
    out = DPO(beta=0.1)(logp, batch)
    close(out.loss.detach(), math.log1p(math.exp(-0.2)) / 2)
    out.loss.backward()
    assert s.grad[2:].abs().max() == 0
    close(out.metrics["pairs_used"], 0.5)
    close(out.metrics["reward_accuracy"], 1.0)  # over the pairs that count


def test_masked_tokens_never_count_even_nan_but_nan_in_a_pair_is_nan():
    s, logp, batch = pair_batch([-10.0, -14.0], [-11.0, -13.0], [1.0, 0.0], lengths=[1, 3], pad=float("nan"))
    out = DPO(beta=0.1)(logp, batch)
    close(out.loss.detach(), math.log1p(math.exp(-0.2)))
    out.loss.backward()
    assert torch.isfinite(s.grad).all()
    s, logp, batch = pair_batch([float("nan"), -14.0], [-11.0, -13.0], [1.0, 0.0])
    assert torch.isnan(DPO()(logp, batch).loss)  # the updater skips such a step and counts it


def test_all_equal_pair_has_the_log2_loss():
    s, logp, batch = pair_batch([-5.0, -5.0], [-5.0, -5.0], [1.0, 0.0])
    out = DPO(beta=0.5)(logp, batch)
    close(out.loss.detach(), math.log(2))
    close(out.metrics["reward_accuracy"], 0.0)


def test_micro_batches_weighted_by_rows_give_the_minibatch_mean():
    seq, ref = [-10.0, -14.0, -2.0, -1.0, -4.0, -6.0], [-11.0, -13.0, -1.0, -3.0, -5.0, -5.0]
    chosen = [1.0, 0.0, 1.0, 0.0, 0.0, 1.0]
    s, logp, batch = pair_batch(seq, ref, chosen)
    loss = DPO()
    whole = loss(logp, batch).loss
    parts = sum(loss(logp[rows], batch.select(rows)).loss * len(rows) / 6
                for rows in (torch.arange(0, 2), torch.arange(2, 6)))
    close(parts.detach(), whole.detach())


def test_bad_pairs_are_refused():
    s, logp, batch = pair_batch([-1.0, -2.0, -3.0], [-1.0, -2.0, -3.0], [1.0, 0.0, 0.0], group=[0, 0, 0])
    with pytest.raises(ValueError, match="group sizes"):
        DPO()(logp, batch)
    s, logp, batch = pair_batch([-1.0, -2.0], [-1.0, -2.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="exactly one chosen"):
        DPO()(logp, batch)
    del batch.extras["chosen"]
    with pytest.raises(ValueError, match="extras\\['chosen'\\]"):
        DPO()(logp, batch)


def test_registered_with_whole_pairs():
    for name in ("dpo", "ipo", "mnpo"):
        cls = POLICY_LOSSES.get(name)
        assert cls.whole_groups and cls.group_size == 2 and {"ref_logp", "chosen"} <= cls.requires
        assert "arXiv:" in cls.paper
    assert "history_logp" in MNPO.requires


# ---- mutation-testing kills (docs/mutation.md)
def test_mnpo_mixture_normalises_the_weights():
    close(MNPO(weights=[1.0, 3.0]).mixture(), [0.25, 0.75])  # λ_h = w_h / Σ w
    close(MNPO(weights=[0.0, 0.0]).mixture(), [0.5, 0.5])  # all zero: uniform


def test_an_empty_batch_has_no_pairs_and_zero_metrics():
    s, logp, batch = pair_batch([-1.0, -2.0], [-1.0, -2.0], [1.0, 0.0])
    empty = batch.select(torch.arange(0))
    out = DPO()(logp[:0], empty)
    assert out.loss.item() == 0.0 and out.token_loss.shape == (0, 1)
    assert out.metrics["pairs_used"].item() == 0.0  # no pair: 0, not the NaN mean of nothing


def test_one_token_rows_are_divided_by_one():
    # lengths 1 and 2. IPO mean: ρ_w = −10 − (−11) = 1, ρ_l = −7 − (−6.5) = −0.5, h = 1.5, ℓ = (1.5 − 5)² = 12.25
    s, logp, batch = pair_batch([-10.0, -14.0], [-11.0, -13.0], [1.0, 0.0], lengths=[1, 2])
    close(IPO(tau=0.1, reduction="mean")(logp, batch).loss.detach(), 12.25)
    # DPO: ℓ = −log σ(0.1·2) split in halves over the two rows: row 0's one token ℓ/2, row 1's tokens ℓ/4
    out = DPO(beta=0.1)(logp, batch)
    ell = math.log1p(math.exp(-0.2))
    close(out.token_loss, [[ell / 2, 0.0], [ell / 4, ell / 4]])


def test_reward_accuracy_counts_a_margin_below_one_and_keeps_the_dtype():
    # ρ_w = −10 − (−10.5) = 0.5, ρ_l = 0, so h = 0.5 > 0: accurate
    s, logp, batch = pair_batch([-10.0, -14.0], [-10.5, -14.0], [1.0, 0.0])
    out = DPO(beta=0.1)(logp, batch)
    close(out.metrics["reward_accuracy"], 1.0)
    assert out.metrics["reward_accuracy"].dtype == torch.float64


def test_errors_name_the_loss_and_a_chosen_flag_of_one_half_is_not_chosen():
    s, logp, batch = pair_batch([-1.0, -2.0], [-1.0, -2.0], [0.5, 0.0])
    with pytest.raises(ValueError, match=r"policy_loss ipo: a pair must have exactly one chosen row .*got \[0\]"):
        IPO()(logp, batch)  # chosen means > 0.5
    del batch.extras["chosen"]
    with pytest.raises(ValueError, match=r"policy_loss dpo needs extras\['chosen'\]"):
        DPO()(logp, batch)


def test_pairs_leave_out_invalid_pairs_and_take_the_masks_dtype():
    s, logp, batch = pair_batch([1.0, 2.0, 3.0, 5.0], [0.0] * 4, [1.0, 0.0, 0.0, 1.0])
    batch.extras["pair_valid"] = torch.tensor([True, True, False, False])  # a bool column counts as 1/0
    pairs = Pairs.of(batch, "dpo")
    assert pairs.valid.tolist() == [True, False]
    x = torch.tensor([1.0, 2.0, 3.0, 5.0], dtype=torch.float32)
    assert pairs.diff(x).tolist() == [-1.0, 0.0]  # 1 − 2; the invalid pair stays 0 (not 5 − 3)
    assert pairs.sign.dtype == torch.float64  # the float64 mask's dtype
    side = pairs.side(x, chosen=True)
    assert side.tolist() == [1.0, 0.0] and side.dtype == torch.float64


def test_mnpo_history_errors_show_the_shape_and_float32_inputs_work():
    s, logp, batch = pair_batch(**MNPO_ROWS)
    mix = MNPO(weights=[1.0, 2.0]).mixture()
    assert mix.dtype == torch.float64 and mix.tolist() == [1 / 3, 2 / 3]
    with pytest.raises(ValueError, match=r"got shape \(2, 2\)"):
        MNPO(weights=[1.0, 0.0, 0.0])(logp, batch)
    del batch.extras["history_logp"]
    with pytest.raises(ValueError, match=r"got shape None"):
        MNPO(weights=[1.0, 0.0])(logp, batch)
    # float32 log-probs with a float64 history: §15(e) with λ = (1, 0), η = 0.5 gives u = 5/3, ℓ = 0.4444
    s, logp, batch = pair_batch(**MNPO_ROWS)
    batch.rewards, batch.ref_logp = batch.rewards.float(), batch.ref_logp.float()
    out = MNPO(weights=[1.0, 0.0], eta=0.5, ratio=1 / 3)(logp.float(), batch)
    close(out.loss.detach(), 0.4444)
    assert out.loss.dtype == torch.float32
