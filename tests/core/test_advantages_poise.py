import pytest
import torch

from polo.core.advantages.linear_probe import fit_probe, pca_projection, predict_probe
from polo.core.advantages.poise import POISEProbe, last_tokens, pair_partner
from polo.core.batch import RolloutBatch
from polo.core.context import StepContext

from .helpers import close

CONTEXT = StepContext(1, lambda b: torch.zeros(b.response_ids.shape), 1e-3)


def poise_batch(rewards, group, hidden_response, d=1, Tp=3, T=4, lengths=None, entropy=None, reasoning=None):
    """hidden: prompt positions 0, response positions ``hidden_response[i]`` (scalar or [d]); the reasoning
    span is the whole response unless ``reasoning`` ([B,T]) is given."""
    B = len(rewards)
    lengths = lengths or [T] * B
    hidden = torch.zeros(B, Tp + T, d, dtype=torch.float64)
    hidden[:, Tp:] = torch.as_tensor(hidden_response, dtype=torch.float64).view(B, 1, -1)
    mask = (torch.arange(T)[None] < torch.tensor(lengths)[:, None]).long()
    return RolloutBatch(
        prompt_ids=torch.ones(B, Tp, dtype=torch.long), prompt_mask=torch.ones(B, Tp, dtype=torch.long),
        response_ids=torch.ones(B, T, dtype=torch.long), response_mask=mask, group=torch.tensor(group),
        rewards=torch.tensor(rewards, dtype=torch.float64),
        extras={"hidden": hidden, "entropy_old": torch.ones(B, T) if entropy is None else torch.as_tensor(entropy),
                "reasoning_mask": mask.clone() if reasoning is None else torch.as_tensor(reasoning)},
    )


def test_cross_rollout_advantages():
    # rows: (prompt 0: y¹, y²), (prompt 1: y¹, y²); the probe reads the response-pooled hidden state
    est = POISEProbe()
    est._probe = {"mean": torch.zeros(5, dtype=torch.float64), "scale": torch.ones(5, dtype=torch.float64),
                  "projection": torch.eye(5, dtype=torch.float64), "bias": torch.tensor(0.0, dtype=torch.float64),
                  "weight": torch.tensor([0, 1.0, 0, 0, 0], dtype=torch.float64)}
    est._y = torch.tensor([0.0, 1.0], dtype=torch.float64)  # the buffer's rewards: predictions clipped to [0, 1]
    batch = poise_batch([1.0, 0.0, 0.0, 0.0], [0, 0, 1, 1], [0.62, 0.48, 0.15, 0.22])
    close(est(batch).advantages[:, 0], [0.5200, -0.6200, -0.2200, -0.1500])


def test_predictions_are_clipped_to_the_buffers_reward_range():
    """The built-in task's reward reaches 1.5 (correct + 0.5 digit_match): a probe fitted on rewards in {0, 1.5}
    predicts up to 1.5 (a [0, 1] clip would cap a sure success's baseline at 1.0), and never beyond."""
    est = POISEProbe(min_examples=4, pca_prompt=None, pca_response=None, ridge_alpha=1e-6)
    batch = poise_batch([0.0, 1.5, 0.0, 1.5], [0, 0, 1, 1], [0.0, 1.0, 0.0, 1.0])
    est.after_update(batch, CONTEXT)
    assert est.reward_range() == (0.0, 1.5)
    close(est(batch).advantages[:, 0], [0.0, 0.0, 0.0, 0.0], atol=1e-4)  # b = g(φ_partner) = 1.5 − 1.5 φ_partner
    # features beyond anything seen: g = 4.5 at φ = −2 and −3 at φ = 3, clipped to 1.5 and 0
    far = poise_batch([1.5, 1.5, 0.0, 0.0], [0, 0, 1, 1], [-2.0, -2.0, 3.0, 3.0])
    close(est(far).advantages[:, 0], [0.0, 0.0, 0.0, 0.0], atol=1e-4)


def test_probe_fit():
    x = torch.tensor([[0.2, 1.0], [0.4, 0.5], [0.9, 0.1], [0.7, 0.3]], dtype=torch.float64)
    probe = fit_probe(x, torch.tensor([0.0, 0.0, 1.0, 1.0]), 0.01, [(0, 2, None)])
    close(probe["weight"], [0.8163, 0.3697])
    close(probe["bias"], 0.5)
    close(predict_probe(probe, torch.tensor([[0.8, 0.2]])), [0.9539])
    close(predict_probe(probe, torch.tensor([[5.0, -5.0]])), [1.0])  # clipped to [0, 1]


def test_pca_blocks_keep_the_top_directions():
    torch.manual_seed(0)
    z = torch.randn(50, 3, dtype=torch.float64) @ torch.diag(torch.tensor([5.0, 1.0, 0.1], dtype=torch.float64))
    p = pca_projection(z, [(0, 3, 1), (3, 3, None)])
    assert p.shape == (3, 1) and abs(abs(float(p[0, 0])) - 1) < 0.05
    assert torch.equal(pca_projection(z, [(0, 3, 7)]), torch.eye(3, dtype=torch.float64))  # k ≥ rank bound: off


def test_cold_start_is_rloo_with_two_samples_and_needs_pairs():
    est = POISEProbe()
    batch = poise_batch([1.0, 0.0, 0.5, 0.5], [3, 8, 8, 3], [0.0] * 4)  # pairs need not be adjacent
    close(est(batch).advantages[:, 0], [0.5, -0.5, 0.5, -0.5])
    assert pair_partner(torch.tensor([3, 8, 8, 3])).tolist() == [3, 2, 1, 0]
    with pytest.raises(ValueError, match="exactly 2 rollouts"):
        est(poise_batch([1.0, 0.0, 0.0], [0, 0, 0], [0.0] * 3))
    assert est.needs() == {"hidden", "entropy_old", "reasoning_mask"}


def test_features_pool_last_tokens_and_entropy_stats():
    est = POISEProbe(pool_tokens=2)
    batch = poise_batch([1.0, 0.0], [0, 0], [0.0, 0.0], T=4, lengths=[3, 0], entropy=[[1.0, 2.0, 3.0, 9.0], [5.0] * 4])
    batch.prompt_mask = torch.tensor([[0, 1, 1], [0, 0, 1]])
    batch.extras["hidden"][:, :3, 0] = torch.tensor([[9.0, 1.0, 3.0], [9.0, 9.0, 4.0]])
    batch.extras["hidden"][0, 3:, 0] = torch.tensor([1.0, 2.0, 4.0, 9.0])
    phi = est.features(batch)
    close(phi[0], [2.0, 3.0, 2.0, (2 / 3) ** 0.5, 2.5])  # prompt mean of last 2, response of last 2, entropy
    close(phi[1], [4.0, 0.0, 0.0, 0.0, 0.0])  # empty response: zeros, finite


def test_features_pool_over_the_reasoning_span_only():
    # response of 4 tokens, the answer marker at position 3: the reasoning span is positions 0..2
    est = POISEProbe(pool_tokens=2)
    entropy = [[1.0, 2.0, 3.0, 9.0, 7.0], [5.0] * 5]
    reasoning = [[1, 1, 1, 0, 1], [0, 0, 0, 0, 0]]  # a 1 on padding is ignored; row 1 answers at once
    batch = poise_batch([1.0, 0.0], [0, 0], [0.0, 0.0], T=5, lengths=[4, 2], entropy=entropy, reasoning=reasoning)
    batch.extras["hidden"][0, 3:, 0] = torch.tensor([1.0, 2.0, 4.0, 8.0, 9.0])
    phi = est.features(batch)
    # hidden: mean of span positions 1, 2 = 3; entropy over the span [1, 2, 3]: mean 2, std sqrt(2/3), last-2 2.5
    close(phi[0], [0.0, 3.0, 2.0, (2 / 3) ** 0.5, 2.5])
    close(phi[1], [0.0, 0.0, 0.0, 0.0, 0.0])  # empty span: zeros, finite
    whole = poise_batch([1.0, 0.0], [0, 0], [0.0, 0.0], T=5, lengths=[4, 2], entropy=entropy)
    whole.extras["hidden"] = batch.extras["hidden"]
    close(est.features(whole)[0], [0.0, 6.0, 3.75, 3.1125, 6.0])  # whole response: positions 2, 3 and all 4


def test_after_update_buffers_pairs_refits_and_round_trips():
    torch.manual_seed(0)
    est = POISEProbe(min_examples=8, buffer_size=10, pca_prompt=None, pca_response=None)
    for step in range(3):
        batch = poise_batch([1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1], torch.rand(4, dtype=torch.float64))
        metrics = est.after_update(batch, CONTEXT)
        assert (est._probe is None) == (step == 0)  # 4 examples < 8: still cold after the first step
    assert len(est._y) == 10 and metrics["poise/buffer"] == 10 and "poise/probe_mse" in metrics
    close(est._y[-4:], [0.0, 1.0, 1.0, 1.0])  # (φ¹, R²), (φ², R¹)
    restored = POISEProbe(min_examples=8, buffer_size=10, pca_prompt=None, pca_response=None)
    restored.load_state_dict(est.state_dict())
    batch = poise_batch([1.0, 0.0, 0.0, 1.0], [0, 0, 1, 1], [0.9, 0.1, 0.3, 0.7])
    assert torch.equal(est(batch).advantages, restored(batch).advantages)
    assert torch.isfinite(est(batch).advantages).all()
    empty = POISEProbe()
    empty.load_state_dict(POISEProbe().state_dict())
    assert empty._probe is None


def test_last_tokens_any_padding_side():
    mask = torch.tensor([[0, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]])
    assert last_tokens(mask, 2).tolist() == [[0, 0, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]]


# ---- mutation-testing kills


def test_probe_mse_is_the_mean_squared_residual_in_the_buffers_reward_range():
    # an exact fit on rewards {0, 1.5}: the fit is scored within [0, 1.5], so its mse is ≈ 0
    # (clipped to [0, 1] the two 1.5 targets would leave 0.5² each: mse 0.125)
    exact = POISEProbe(min_examples=4, pca_prompt=None, pca_response=None, ridge_alpha=1e-6)
    metrics = exact.after_update(poise_batch([0.0, 1.5, 0.0, 1.5], [0, 0, 1, 1], [0.0, 1.0, 0.0, 1.0]), CONTEXT)
    assert metrics["poise/probe_mse"] == pytest.approx(0.0, abs=1e-8)
    # a huge ridge α flattens the probe to its intercept, the targets' mean: y = R_partner = [1.5, 0, 1.5, 1.5],
    # ŷ = 1.125, residuals [−0.375, 1.125, −0.375, −0.375]: mse = (3·0.140625 + 1.265625)/4 = 0.421875
    flat = POISEProbe(min_examples=4, pca_prompt=None, pca_response=None, ridge_alpha=1e9)
    metrics = flat.after_update(poise_batch([0.0, 1.5, 1.5, 1.5], [0, 0, 1, 1], [0.0, 1.0, 0.0, 1.0]), CONTEXT)
    assert metrics == {"poise/buffer": 4.0, "poise/probe_mse": pytest.approx(0.421875, abs=1e-6)}


def test_probe_baselines_take_the_masks_dtype():
    # float32 rewards: the probe's float64 predictions (b = 1.125 for every row, as above) are cast back
    est = POISEProbe(min_examples=4, pca_prompt=None, pca_response=None, ridge_alpha=1e9)
    batch = poise_batch([0.0, 1.5, 1.5, 1.5], [0, 0, 1, 1], [0.0, 1.0, 0.0, 1.0])
    est.after_update(batch, CONTEXT)
    batch.rewards = batch.rewards.float()
    adv = est(batch).advantages
    assert adv.dtype == torch.float32
    close(adv[:, 0], [-1.125, 0.375, 0.375, 0.375])


def test_state_dict_round_trips_the_buffer():
    est = POISEProbe(min_examples=8, pca_prompt=None, pca_response=None)
    est.after_update(poise_batch([1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1], [0.9, 0.1, 0.3, 0.7]), CONTEXT)
    state = est.state_dict()
    assert set(state) == {"buffer_x", "buffer_y"}  # 4 examples < 8: no probe yet
    restored = POISEProbe(min_examples=8, pca_prompt=None, pca_response=None)
    restored.load_state_dict(state)
    again = restored.state_dict()
    assert torch.equal(again["buffer_x"], state["buffer_x"]) and torch.equal(again["buffer_y"], state["buffer_y"])


def test_groups_of_other_sizes_are_refused_with_the_setting_to_change():
    with pytest.raises(ValueError, match=r"^poise_probe needs exactly 2 rollouts per prompt "
                                         r"\(rollout\.samples_per_prompt: 2\); got group sizes \[1, 3\]$"):
        POISEProbe()(poise_batch([1.0, 0.0, 0.0, 1.0], [0, 0, 0, 1], [0.0] * 4))
