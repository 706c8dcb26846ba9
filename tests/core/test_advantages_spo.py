import pytest
import torch

from polo.core.advantages.spo import SPOTracker
from polo.core.batch import RolloutBatch
from polo.core.context import StepContext, TrainingContext
from polo.core.registry import ADVANTAGES, ConfigError

from .helpers import close


def spo_batch(prompt_index, correct, lengths=None, T=3):
    B = len(prompt_index)
    lengths = lengths or [2] * B
    ids = torch.arange(B * T).view(B, T) + 1  # distinct response tokens
    return RolloutBatch(
        prompt_ids=torch.tensor([[0, 7, 8]] * B), prompt_mask=torch.tensor([[0, 1, 1]] * B),
        response_ids=ids, response_mask=(torch.arange(T)[None] < torch.tensor(lengths)[:, None]).long(),
        group=torch.arange(B), rewards=torch.tensor(correct, dtype=torch.float64),
        extras={"prompt_index": torch.tensor(prompt_index), "correct": torch.tensor(correct, dtype=torch.float64)},
    )


def policy(shift=0.0):
    """A fake policy: log π(token) = −0.01·token_id − shift (0 where masked)."""
    return lambda b: (-0.01 * b.response_ids.double() - shift) * b.response_mask


def tracker_with(alpha, beta, **kw):
    est = SPOTracker(**kw)
    est.load_state_dict({"alpha": torch.tensor(alpha, dtype=torch.float64), "beta": torch.tensor(beta, dtype=torch.float64),
                         "last_prompt_index": torch.zeros(0, dtype=torch.long)})
    return est


def test_offline_init():
    est = SPOTracker()
    est.init_offline(torch.tensor([5]), torch.tensor([3]), 8)
    close(est._alpha[5], 3.1111)
    close(est._beta[5], 4.8889)
    close(est.success_probability(torch.tensor([5, 0])), [0.3889, 0.5])  # unseen prompts: prior 0.5


def test_advantage_and_sampling_weights():
    est = tracker_with([3, 1, 6, 0.5], [5, 7, 2, 0.5])
    batch = spo_batch([0, 1, 2, 3], [1.0, 0.0, 1.0, 0.0])
    close(est.success_probability(torch.arange(4)), [0.3750, 0.1250, 0.7500, 0.5000])
    raw = tracker_with([3, 1, 6, 0.5], [5, 7, 2, 0.5], normalize=False)(batch).advantages[:, 0]
    close(raw, [0.6250, -0.1250, 0.2500, -0.5000])
    out = est(batch).advantages
    close(out[:, 0], [1.1619, -0.3873, 0.3873, -1.1619])
    assert (out[:, 2] == 0).all()  # padding
    w = est.sampling_weights(torch.arange(4))
    close(w, [0.5341, 0.3807, 0.4830, 0.5500])
    close(w / w.sum(), [0.2742, 0.1955, 0.2480, 0.2824])


def test_kl_adaptive_forgetting():
    est = tracker_with([3, 1, 6, 0.5], [5, 7, 2, 0.5])
    batch = spo_batch([0, 1, 2, 3], [1.0, 0.0, 1.0, 0.0])
    est.after_update(batch, StepContext(1, policy(), 1e-3))  # stores the responses and their log-probs
    est.load_state_dict({**est.state_dict(), "alpha": torch.tensor([3, 1, 6, 0.5], dtype=torch.float64),
                         "beta": torch.tensor([5, 7, 2, 0.5], dtype=torch.float64)})
    shifts = torch.tensor([0.03, 0.0, 0.12, 0.5], dtype=torch.float64)  # |Δ log π| on every stored token

    def moved(b):
        if b.batch_size == 4 and b.old_logp is not None:  # the stored responses
            return policy()(b) - shifts[:, None] * b.response_mask
        return policy()(b)

    metrics = est.after_update(batch, StepContext(2, moved, 1e-3))
    close(est._alpha, [3.6250, 0.9600, 6.2500, 0.4375])
    close(est._beta, [4.3750, 7.7200, 1.7500, 1.4375])
    close(est.success_probability(torch.arange(4)), [0.4531, 0.1106, 0.7812, 0.2333])
    assert abs(metrics["spo/rho_mean"] - (0.875 * 3 + 0.96) / 4) < 1e-9


def test_first_visit_uses_rho_max_and_constant_rho_option():
    est = SPOTracker()
    est.after_update(spo_batch([2], [1.0]), StepContext(1, policy(), 1e-3))
    close(est._alpha[2], 0.96 * 0.5 + 1)
    const = SPOTracker(rho_constant=0.5)
    const.after_update(spo_batch([0], [0.0]), StepContext(1, policy(), 1e-3))
    close(const._beta[0], 0.5 * 0.5 + 1)


def test_duplicates_sum_their_evidence_and_state_round_trip():
    est = SPOTracker()
    batch = spo_batch([4, 1, 4], [1.0, 0.0, 0.0], lengths=[1, 0, 3])  # a fully masked response too
    est.after_update(batch, StepContext(1, policy(), 1e-3))
    close(est._alpha[[1, 4]], [0.96 * 0.5, 0.96 * 0.5 + 1])
    close(est._beta[[1, 4]], [0.96 * 0.5 + 1, 0.96 * 0.5 + 1])
    assert est._last[4]["response_ids"].tolist() == [7, 8, 9] and len(est._last[1]["logp"]) == 0
    restored = SPOTracker()
    restored.load_state_dict(est.state_dict())
    for x in (1, 4):
        for k, v in est._last[x].items():
            assert torch.equal(restored._last[x][k], v)
    second = spo_batch([4, 1], [1.0, 1.0])
    context = StepContext(2, policy(0.1), 1e-3)
    a, b = est.after_update(second, context), restored.after_update(second, context)
    assert a == b and torch.equal(est._alpha, restored._alpha)
    assert a["spo/policy_distance"] == pytest.approx(0.05)  # prompt 4 moved by 0.1, prompt 1 stored no token


class FakeRollouts:
    """``rollout(prompt_index, k)``: k rows per prompt (consecutive), the first ``wins[x]`` of prompt x correct."""

    def __init__(self, wins):
        self.wins, self.calls = wins, []

    def __call__(self, prompt_index, samples):
        self.calls.append((prompt_index.tolist(), samples))
        index = prompt_index.repeat_interleave(samples)
        rank = torch.arange(samples).repeat(len(prompt_index))
        correct = (rank < torch.tensor([self.wins[int(x)] for x in index])).double()
        return spo_batch(index.tolist(), correct.tolist())


def test_before_training_estimates_the_prior_from_offline_samples():
    # K = 8, N0 = 1/(1 − 0.875) = 8: s = 3 → α0 = 8·3.5/9, β0 = 8·5.5/9 (p̂ = 0.3889); s = 8 → p̂ = 8.5/9; s = 0
    rollouts = FakeRollouts({5: 3, 2: 8, 9: 0})
    est = SPOTracker(init_chunk=2)
    metrics = est.before_training(TrainingContext(torch.tensor([5, 2, 9]), rollouts))
    assert rollouts.calls == [([5, 2], 8), ([9], 8)]  # chunks of init_chunk prompts, init_samples each
    close(est._alpha[[5, 2, 9]], [3.1111, 7.5556, 0.4444])
    close(est._beta[[5, 2, 9]], [4.8889, 0.4444, 7.5556])
    close(est.success_probability(torch.tensor([5, 2, 9, 0])), [0.3889, 0.9444, 0.0556, 0.5])
    assert metrics["spo/init_prompts"] == 3 and metrics["spo/init_samples"] == 24
    assert metrics["spo/init_accuracy"] == pytest.approx(11 / 24)
    assert metrics["spo/init_p_hat_mean"] == pytest.approx((3.5 + 8.5 + 0.5) / 9 / 3)
    restored = SPOTracker()
    restored.load_state_dict(est.state_dict())  # the prior is checkpointed with the tracker
    assert torch.equal(restored.success_probability(torch.tensor([5, 2, 9])),
                       est.success_probability(torch.tensor([5, 2, 9])))


def test_before_training_options():
    rollouts = FakeRollouts({5: 3, 2: 8, 9: 0})
    est = SPOTracker(init_prompts=2, init_samples=4)
    est.before_training(TrainingContext(torch.tensor([5, 2, 9]), rollouts))
    assert rollouts.calls == [([5, 2], 4)]  # the first init_prompts prompts, one chunk
    close(est.success_probability(torch.tensor([5, 2, 9])), [3.5 / 5, 4.5 / 5, 0.5])  # K = 4; 9 keeps the prior
    off = SPOTracker(offline_init=False)
    assert off.before_training(TrainingContext(torch.tensor([5]), rollouts)) == {} and len(rollouts.calls) == 1
    assert len(off._alpha) == 0
    empty = SPOTracker()
    assert empty.before_training(TrainingContext(torch.zeros(0, dtype=torch.long), rollouts)) == {
        "spo/init_prompts": 0.0}


def test_before_training_prompt_without_rows_keeps_its_prior():
    def drop_prompt_7(prompt_index, samples):
        keep = prompt_index[prompt_index != 7]
        return FakeRollouts({3: 1})(keep, samples)

    est = SPOTracker(init_samples=2)
    est.before_training(TrainingContext(torch.tensor([3, 7]), drop_prompt_7))
    close(est.success_probability(torch.tensor([3, 7])), [1.5 / 3, 0.5])
    close(est._alpha[7], 0.5)


def test_single_row_and_all_equal_batches_are_finite():
    est = SPOTracker()
    close(est(spo_batch([0], [1.0])).advantages[0, :2], [0.5, 0.5])  # one row: A = r − p̂ unnormalized
    assert est(spo_batch([0, 1], [1.0, 1.0])).advantages.abs().max() == 0


def test_config_validation():
    with pytest.raises(ConfigError, match="rho_min"):
        ADVANTAGES.build({"name": "spo_tracker", "rho_min": 0.99})


# ---- mutation-testing kills (docs/mutation.md): each pins a line of the tracker a mutant changed unnoticed
def test_needs_follow_the_reward_mode():
    assert SPOTracker().needs() == {"prompt_index", "correct"}
    assert SPOTracker(reward="scalar").needs() == {"prompt_index"}


def test_scalar_reward_is_clamped_to_the_unit_interval():
    # r = clamp([1.7, −0.3, 0.4, 1.0], 0, 1) = [1, 0, 0.4, 1]; p̂ = [0.375, 0.125, 0.75, 0.5] → A = r − p̂
    est = tracker_with([3, 1, 6, 0.5], [5, 7, 2, 0.5], reward="scalar", normalize=False)
    batch = spo_batch([0, 1, 2, 3], [1.0, 0.0, 1.0, 0.0])
    batch.rewards = torch.tensor([[1.7], [-0.3], [0.4], [1.0]], dtype=torch.float64)
    close(est(batch).advantages[:, 0], [0.625, -0.125, -0.35, 0.5])


def test_normalisation_adds_eps_to_the_std():
    # A = [0.625, −0.125, 0.25, −0.5]: mean 0.0625, unbiased std 0.4841; eps = 1 → (A − mean)/(std + 1)
    est = tracker_with([3, 1, 6, 0.5], [5, 7, 2, 0.5], eps=1.0)
    close(est(spo_batch([0, 1, 2, 3], [1.0, 0.0, 1.0, 0.0])).advantages[:, 0], [0.3790, -0.1263, 0.1263, -0.3790])


def test_advantages_take_the_masks_dtype():
    batch = spo_batch([0, 1], [1.0, 0.0])
    batch.rewards = batch.rewards.float()  # a float32 batch: the mask, and so the advantages, are float32
    assert SPOTracker()(batch).advantages.dtype == torch.float32


def test_tracker_grows_to_the_largest_prompt_index():
    est = SPOTracker()
    est.success_probability(torch.zeros(0, dtype=torch.long))
    assert len(est.state_dict()["alpha"]) == 0  # no prompt seen: nothing tracked
    est.success_probability(torch.tensor([1]))
    est.success_probability(torch.tensor([3]))
    assert len(est.state_dict()["alpha"]) == len(est.state_dict()["beta"]) == 4


def test_one_offline_sample_counts_and_rows_outside_the_pool_are_ignored():
    # K = 1, s = 1, N0 = 8: α0 = 8·1.5/2 = 6, β0 = 8·0.5/2 = 2 (p̂ = 0.75); the rollout also returns a row of
    # prompt 6, outside the pool {5}: it is left out of the estimate
    def with_a_stray_row(prompt_index, samples):
        return spo_batch(prompt_index.tolist() * samples + [6], [1.0] * (len(prompt_index) * samples) + [0.0])

    est = SPOTracker(init_samples=1)
    metrics = est.before_training(TrainingContext(torch.tensor([5]), with_a_stray_row))
    close(est._alpha[5], 6.0)
    close(est._beta[5], 2.0)
    assert metrics["spo/init_accuracy"] == 1.0 and metrics["spo/init_samples"] == 1
    close(est.success_probability(torch.tensor([6])), [0.5])  # prompt 6 keeps the prior


def test_after_update_metrics_and_the_stored_prompts_are_left_padded():
    est = tracker_with([3, 1], [5, 7])
    first = spo_batch([0, 1], [1.0, 0.0])
    first.prompt_ids = torch.tensor([[0, 7, 8], [5, 6, 9]])
    first.prompt_mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    metrics = est.after_update(first, StepContext(1, policy(), 1e-3))
    # first visits: ρ = ρ_max; α = [0.96·3 + 1, 0.96·1], β = [0.96·5, 0.96·7 + 1]
    assert metrics["spo/tracked_prompts"] == 2.0
    assert metrics["spo/p_hat_mean"] == pytest.approx((3.88 / 8.68 + 0.96 / 8.68) / 2)
    seen = []

    def recording(b):
        seen.append(b)
        return policy()(b)

    est.after_update(spo_batch([0, 1], [1.0, 1.0]), StepContext(2, recording, 1e-3))
    stored = next(b for b in seen if b.old_logp is not None)  # the previous responses, re-scored
    assert stored.prompt_ids.tolist() == [[0, 7, 8], [5, 6, 9]]
    assert stored.prompt_mask.tolist() == [[0, 1, 1], [1, 1, 1]]


def test_correct_mode_reads_the_correct_column_not_the_reward():
    batch = spo_batch([0, 1], [1.0, 0.0])
    batch.rewards = torch.tensor([[0.0], [1.0]], dtype=torch.float64)  # the scalar reward says the opposite
    close(SPOTracker(normalize=False)(batch).advantages[:, 0], [0.5, -0.5])  # r = correct = [1, 0], p̂ = 0.5


def test_prior_is_kept_in_float64_and_empty_responses_are_stored():
    est = SPOTracker(prior=0.3)
    est.success_probability(torch.tensor([1]))
    assert est.state_dict()["alpha"].tolist() == [0.3, 0.3]  # exactly 0.3, not its float32 rounding
    est.after_update(spo_batch([0, 1], [1.0, 0.0], lengths=[0, 0], T=0), StepContext(1, policy(), 1e-3))
    assert [len(est._last[x]["response_ids"]) for x in (0, 1)] == [0, 0]  # a batch of zero-width responses
