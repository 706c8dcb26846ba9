import math

import pytest
import torch

from polo.core.credit.rollout_is import RolloutIS
from polo.core.registry import CREDIT, ConfigError

from .helpers import build_batch, close

LOG_W = [[0.5, -1.0, 1.0, 0.0], [30.0, 0.0, 0.0, 0.0]]  # old_logp − rollout_logp


def batch(mask=((1, 1, 1, 1), (1, 1, 0, 0))):
    old = torch.full((2, 4), -1.0, dtype=torch.float64)
    b = build_batch([0.0, 0.0], mask=torch.tensor(mask), old_logp=old, advantages=torch.ones(2, 4))
    b.extras["rollout_logp"] = old - torch.tensor(LOG_W, dtype=torch.float64)
    return b


@pytest.mark.parametrize("mode, expected", [
    ("tis", [[math.exp(0.5), math.exp(-1.0), 2.0, 1.0], [2.0, 1.0, 0.0, 0.0]]),
    ("seq_tis", [[math.exp(0.5)] * 4, [2.0, 2.0, 0.0, 0.0]]),
    ("mask", [[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0]]),
])
def test_modes(mode, expected):
    close(RolloutIS(mode=mode)(batch()), expected)


def test_fully_masked_row_and_needs():
    for mode in ("tis", "seq_tis", "mask"):
        w = RolloutIS(mode=mode)(batch(mask=((1, 1, 1, 1), (0, 0, 0, 0))))
        assert torch.isfinite(w).all() and (w[1] == 0).all()
    assert RolloutIS().needs() == {"old_logp", "rollout_logp"}
    with pytest.raises(ConfigError, match="cap"):
        CREDIT.build({"name": "rollout_is", "cap": 0.5})


def test_diagnostics_measure_the_gap_between_engine_and_trainer():
    old = torch.log(torch.tensor([[0.5, 0.25, 0.9]]))
    b = build_batch([0.0], mask=torch.tensor([[1, 1, 0]]), old_logp=old, advantages=torch.ones(1, 3))
    b.extras["rollout_logp"] = torch.log(torch.tensor([[0.25, 0.25, 0.1]]))
    credit = RolloutIS(cap=2.0)
    row = credit.diagnostics(b, credit(b))
    # log w = [log 2, 0] on the two unmasked tokens: w = [2, 1]
    log2 = math.log(2.0)
    assert (row["credit/min"], row["credit/max"], row["credit/zero_frac"]) == (1.0, 2.0, 0.0)
    assert row["mismatch/k1"] == pytest.approx(-0.5 * log2, rel=1e-6)
    assert row["mismatch/k3"] == pytest.approx(0.5 * (1 - log2), rel=1e-6)
    assert row["mismatch/abs_log_ratio_max"] == pytest.approx(log2, rel=1e-6)
    assert row["mismatch/ess"] == pytest.approx(9 / 10, rel=1e-6)  # (2 + 1)² / (2 · (4 + 1))
    assert row["mismatch/prob_diff_mean"] == pytest.approx(0.125, rel=1e-6)


# ---- mutation-testing kills (docs/mutation.md)
def test_mask_mode_keeps_both_bounds_and_what_lies_between():
    # cap 2: w ∈ [1/2, 2] kept; w = 2 and w = 1/2 are exact in float64 (exp(±ln 2)); w = 0.8 is inside
    old = torch.zeros(1, 4, dtype=torch.float64)
    b = build_batch([0.0], mask=torch.ones(1, 4), old_logp=old, advantages=torch.ones(1, 4))
    b.extras["rollout_logp"] = old - torch.tensor([[math.log(2.0), -math.log(2.0), math.log(0.8), math.log(2.5)]],
                                                  dtype=torch.float64)
    close(RolloutIS(mode="mask", cap=2.0)(b), [[1.0, 1.0, 1.0, 0.0]])


def test_diagnostics_of_one_token_and_of_none():
    from polo.core.credit.rollout_is import importance_metrics

    log2 = math.log(2.0)
    b = build_batch([0.0], mask=torch.tensor([[1, 0]]), old_logp=torch.log(torch.tensor([[0.5, 0.9]])),
                    advantages=torch.ones(1, 2))
    b.extras["rollout_logp"] = torch.log(torch.tensor([[0.25, 0.1]]))
    credit = RolloutIS(cap=2.0)
    row = credit.diagnostics(b, credit(b))  # one token, log w = log 2: means over n = 1
    assert row["mismatch/k1"] == pytest.approx(-log2, rel=1e-6)
    assert row["mismatch/abs_log_ratio_mean"] == pytest.approx(log2, rel=1e-6)
    assert row["mismatch/prob_diff_mean"] == pytest.approx(0.25, rel=1e-6)
    none = importance_metrics(torch.ones(1, 2), torch.zeros(1, 2), "m")
    assert none["m/abs_log_ratio_max"] == 0.0 and none["m/k1"] == 0.0


def test_importance_metrics_average_clip_and_normalise():
    from polo.core.credit.rollout_is import importance_metrics

    log2 = math.log(2.0)
    two = importance_metrics(torch.tensor([[log2, -log2]]), torch.ones(1, 2), "m")
    assert two["m/abs_log_ratio_mean"] == pytest.approx(log2, rel=1e-6)  # (log 2 + log 2)/2
    far = importance_metrics(torch.tensor([[30.0]]), torch.ones(1, 1), "m")
    assert far["m/k1"] == pytest.approx(-20.0)  # log w is clipped to [−20, 20]
    small = importance_metrics(torch.tensor([[-5.0, -5.0]]), torch.ones(1, 2), "m")
    assert small["m/ess"] == pytest.approx(1.0, rel=1e-5)  # equal weights: ESS 1, however small they are


def test_log_ratios_are_clipped_to_20_per_token_and_per_sequence():
    old = torch.zeros(2, 2, dtype=torch.float64)
    b = build_batch([0.0, 0.0], mask=torch.ones(2, 2), old_logp=old, advantages=torch.ones(2, 2))
    b.extras["rollout_logp"] = old - torch.tensor([[25.0, -24.0], [-15.0, -15.0]], dtype=torch.float64)
    w = RolloutIS(mode="seq_tis", cap=2.0)(b)
    # row 0: each token clipped first, 20 + (−20) = 0, w = 1 (unclipped: 25 − 24 = 1 → capped at 2)
    # row 1: no token clipped, the sum −30 is clipped to −20: w = e^−20 (not e^−30)
    torch.testing.assert_close(w, torch.tensor([[1.0, 1.0], [math.exp(-20.0)] * 2], dtype=torch.float64),
                               rtol=1e-9, atol=0)
    b.extras["rollout_logp"] = old - torch.tensor([[-25.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    tis = RolloutIS(mode="tis", cap=2.0)(b)  # a token's log w of −25 is clipped to −20
    torch.testing.assert_close(tis, torch.tensor([[math.exp(-20.0), 1.0], [1.0, 1.0]], dtype=torch.float64),
                               rtol=1e-9, atol=0)


def test_rollout_logp_is_read_in_the_trainers_dtype_and_the_mean_weight_is_logged():
    b = build_batch([0.0], mask=torch.ones(1, 2), advantages=torch.ones(1, 2))
    b.rewards = b.rewards.float()  # mask float32
    b.old_logp = torch.tensor([[-1.0, -1.0]])  # float32
    # float64 engine log-probs that round to the trainer's −1.0 in float32: no mismatch once converted
    b.extras["rollout_logp"] = torch.tensor([[-1.0 - 1e-12, -1.0 - 1e-12]], dtype=torch.float64)
    credit = RolloutIS(cap=2.0)
    w = credit(b)
    assert w.dtype == torch.float32 and w.tolist() == [[1.0, 1.0]]
    row = credit.diagnostics(b, w)
    assert row["mismatch/abs_log_ratio_max"] == 0.0 and row["mismatch/prob_diff_mean"] == 0.0
    assert row["credit/mean"] == 1.0


def test_importance_metrics_clip_a_large_negative_log_ratio_and_accept_no_tokens():
    from polo.core.credit.rollout_is import importance_metrics

    far = importance_metrics(torch.tensor([[-30.0]]), torch.ones(1, 1), "m")
    assert far["m/k1"] == pytest.approx(20.0)  # −(−20): clipped below at −20
    empty = importance_metrics(torch.zeros(1, 0), torch.zeros(1, 0), "m")  # zero-width responses
    assert empty["m/abs_log_ratio_max"] == 0.0


def test_credit_diagnostics_name_the_mean_weight():
    old = torch.log(torch.tensor([[0.5, 0.25]]))
    b = build_batch([0.0], mask=torch.ones(1, 2), old_logp=old, advantages=torch.ones(1, 2))
    b.extras["rollout_logp"] = torch.log(torch.tensor([[0.25, 0.25]]))
    credit = RolloutIS(cap=2.0)
    row = credit.diagnostics(b, credit(b))
    assert row["credit/mean"] == pytest.approx(1.5)  # w = [2, 1]


def test_seq_tis_clips_the_summed_log_ratio_at_20_below_a_huge_cap():
    old = torch.zeros(1, 2, dtype=torch.float64)
    b = build_batch([0.0], mask=torch.ones(1, 2), old_logp=old, advantages=torch.ones(1, 2))
    b.extras["rollout_logp"] = old - torch.tensor([[10.5, 10.0]], dtype=torch.float64)
    w = RolloutIS(mode="seq_tis", cap=1e10)(b)  # Σ log w = 20.5 → 20; e^20 ≈ 4.85e8 stays under the cap
    torch.testing.assert_close(w, torch.full((1, 2), math.exp(20.0), dtype=torch.float64), rtol=1e-9, atol=0)
