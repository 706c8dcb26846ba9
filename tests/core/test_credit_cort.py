"""CoRT token weights: bounded tanh of the rubric contrast, mean 1 per response, SmoothStep warm-up."""
import pytest
import torch

from polo.core.context import StepContext
from polo.core.credit.cort import CoRT, smoothstep
from polo.core.registry import CREDIT, ConfigError

from .helpers import build_batch, close


def cort_batch(contrast, mask=None):
    contrast = torch.as_tensor(contrast, dtype=torch.float64)
    b = build_batch([0.0] * len(contrast), mask=torch.ones_like(contrast) if mask is None else mask)
    b.extras["rubric_contrast"] = contrast
    return b


def at_step(credit, step):
    credit.after_update(None, StepContext(step, None, 0.0))
    return credit


def test_worked_example_mid_warm_up():
    # §7: c = [2.0, 0.1, -0.5, 0.0], A = -0.8, lambda 0.5, tau 1, u = 0.5 (k = 25 of k_0 = 0, k_1 = 50)
    b = cort_batch([[2.0, 0.1, -0.5, 0.0]])
    close(at_step(CoRT(), 50)(b), [[1.3784, 0.9764, 0.7152, 0.9301]])  # w (s = 1)
    w_eff = at_step(CoRT(), 25)(b)
    close(w_eff, [[1.1892, 0.9882, 0.8576, 0.9650]])
    adv = -0.8 * w_eff
    close(adv, [[-0.9513, -0.7906, -0.6861, -0.7720]])
    close(adv.sum(), -3.2)  # = 4 x -0.8: the response's total advantage is kept


def test_smoothstep():
    assert [smoothstep(k, 0, 50) for k in (0, 25, 50, 80)] == [0.0, 0.5, 1.0, 1.0]
    assert smoothstep(9, 10, 10) == 0.0 and smoothstep(10, 10, 10) == 1.0


def test_first_step_is_uniform_and_weights_keep_each_response_total():
    b = cort_batch([[3.0, -2.0, 0.5], [0.1, 0.2, 0.0]], mask=torch.tensor([[1, 1, 1], [1, 1, 0]]))
    close(CoRT()(b), b.mask)  # k = 0: s = 0, weights 1
    w = at_step(CoRT(), 60)(b)
    close(w.sum(-1), [3.0, 2.0])
    assert w[1, 2] == 0
    valid = w[b.mask.bool()]
    assert (valid <= 1.5 / 0.5).all() and (valid >= 0.5 / 1.5).all()  # w~ in [1 - l, 1 + l], its mean too


def test_all_equal_contrast_and_empty_rows():
    b = cort_batch([[0.7, 0.7], [0.0, 0.0]], mask=torch.tensor([[1, 1], [0, 0]]))
    w = at_step(CoRT(), 100)(b)
    close(w, [[1.0, 1.0], [0.0, 0.0]])


def test_nan_contrast_propagates():
    w = at_step(CoRT(), 100)(cort_batch([[float("nan"), 1.0]]))
    assert torch.isnan(w).all()  # a NaN token poisons its response's mean: visible, not hidden


def test_step_counter_is_checkpointed():
    credit = at_step(CoRT(), 30)
    restored = CoRT()
    restored.load_state_dict(credit.state_dict())
    b = cort_batch([[1.0, -1.0]])
    assert torch.equal(restored(b), credit(b))
    assert credit.after_update(None, StepContext(31, None, 0.0))["cort/warmup"] == pytest.approx(smoothstep(31, 0, 50))


def test_settings_are_checked():
    assert CREDIT.get("cort") is CoRT and CoRT().needs() == {"rubric_contrast"}
    with pytest.raises(ConfigError, match="warmup_end"):
        CREDIT.build({"name": "cort", "warmup_start": 10, "warmup_end": 5})
    with pytest.raises(ConfigError, match="rubric"):
        CREDIT.build({"name": "cort", "rubric_template": "{prompt} only"})
    with pytest.raises(ConfigError, match="bound"):
        CREDIT.build({"name": "cort", "bound": 1.0})


def test_diagnostics_give_the_applied_and_the_warmed_up_spread():
    # §7's example at u = 0.5: |w_eff - 1| = [0.1892, 0.0118, 0.1424, 0.0350],
    # |w - 1| = [0.3784, 0.0236, 0.2848, 0.0699]
    b = cort_batch([[2.0, 0.1, -0.5, 0.0]])
    credit = at_step(CoRT(), 25)
    row = credit.diagnostics(b, credit(b))
    assert row["cort/spread"] == pytest.approx(0.0946, abs=1e-4)
    assert row["cort/target_spread"] == pytest.approx(0.1892, abs=1e-4)
    assert row["credit/max"] == pytest.approx(1.1892, abs=1e-4)


# ---- mutation-testing kills (docs/mutation.md)
def test_smoothstep_from_a_later_start():
    # k_0 = 10, k_1 = 20: u = (k − 10)/10
    assert [smoothstep(k, 10, 20) for k in (5, 10, 15, 20)] == [0.0, 0.0, 0.5, 1.0]
    assert smoothstep(12, 10, 20) == pytest.approx(3 * 0.2**2 - 2 * 0.2**3)


def test_temperature_divides_the_contrast():
    # §7's contrast at τ = 2: w̃ = 1 + 0.5·tanh(c/2) = [1.3808, 1.0250, 0.8775, 1.0], mean 1.0708
    b = cort_batch([[2.0, 0.1, -0.5, 0.0]])
    close(at_step(CoRT(temperature=2.0), 50)(b), [[1.2895, 0.9572, 0.8195, 0.9339]])


def test_weights_take_the_masks_dtype():
    b = cort_batch([[2.0, 0.1]])
    b.rewards = b.rewards.float()  # float32 mask; the contrast stays float64
    assert at_step(CoRT(), 50)(b).dtype == torch.float32
