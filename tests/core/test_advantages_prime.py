"""PRIME's advantage: RLOO of the outcome and, token by token, of the implicit process rewards; returns-to-go;
batch whitening. The worked example is computed by hand below."""
import pytest
import torch

from polo.methods.prime.advantage import PRIME, leave_one_out
from polo.core.registry import ADVANTAGES, ConfigError

from .helpers import build_batch, close

PAD = 9.0  # a process reward on a masked token: never read
# Rows in batch order: group 7 (rows a0, a1, a2) interleaved with group 2 (rows b0, b1); width T = 3.
GROUP = [7, 2, 7, 2, 7]
MASK = [[1, 1, 1], [1, 1, 0], [1, 1, 0], [1, 1, 1], [1, 0, 0]]
OUTCOME = [1.0, 0.0, 0.0, 0.0, 1.0]
PROCESS = [[0.1, -0.2, 0.4], [0.2, 0.2, PAD], [0.3, 0.1, PAD], [0.0, -0.3, 0.3], [-0.5, PAD, PAD]]
# By hand, group 7 (K = 3, rows a0 = 0, a1 = 2, a2 = 4):
#   outcome RLOO 3/2·(R − 2/3) = [0.5, −1, 0.5] (= R_i − mean of the other two);
#   mean process rewards m = [0.3/3, 0.4/2, −0.5/1] = [0.1, 0.2, −0.5], their group mean −0.2/3;
#   r̃ = 3/2·(r + 0.2/3) = 1.5·r + 0.1: a0 [0.25, −0.2, 0.7], a1 [0.55, 0.25], a2 [−0.65];
#   sums to go: a0 [0.75, 0.5, 0.7], a1 [0.8, 0.25], a2 [−0.65].
# Group 2 (K = 2, rows b0 = 1, b1 = 3): outcomes equal, RLOO [0, 0]; m = [0.2, 0.0], mean 0.1;
#   r̃ = 2·(r − 0.1): b0 [0.2, 0.2], b1 [−0.2, −0.8, 0.4]; to go: b0 [0.4, 0.2], b1 [−0.6, −0.4, 0.4].
# Returns with both coefficients 1 (outcome + process to go), 0 on masked tokens:
RETURNS = [[1.25, 1.0, 1.2], [0.4, 0.2, 0.0], [-0.2, -0.75, 0.0], [-0.6, -0.4, 0.4], [-0.15, 0.0, 0.0]]
# Whitened over the 11 trained tokens: mean 0.213636, unbiased variance 0.500545:
WHITENED = [[1.4648, 1.1115, 1.3942], [0.2634, -0.0193, 0.0], [-0.5847, -1.3620, 0.0],
            [-1.1500, -0.8673, 0.2634], [-0.5140, 0.0, 0.0]]
# The recipe's settings (coefficients 5, normalize_process): the largest |process sum to go| is a2's 0.5, so
# r is divided by 0.5 + 1e-6 and G = 5·outcome + (5/0.500001)·(process to go):
DEFAULT_RETURNS = [[10.0, 7.5, 9.5], [4.0, 2.0, 0.0], [3.0, -2.5, 0.0], [-6.0, -4.0, 4.0], [-4.0, 0.0, 0.0]]
# whitened: mean 2.136359, unbiased variance 31.554441
DEFAULT_ADVANTAGES = [[1.3999, 0.9548, 1.3109], [0.3318, -0.0243, 0.0], [0.1537, -0.8254, 0.0],
                      [-1.4484, -1.0924, 0.3318], [-1.0924, 0.0, 0.0]]


def prime_batch(outcome=OUTCOME, process=PROCESS, group=GROUP, mask=MASK):
    batch = build_batch(outcome, group, torch.tensor(mask))
    batch.extras["process_rewards"] = torch.tensor(process, dtype=torch.float64)
    return batch


HAND = dict(outcome_coef=1.0, process_coef=1.0, normalize_process=False)


def test_worked_example_returns_and_whitened_advantages():
    result = PRIME(**HAND, whiten=False)(prime_batch())
    close(result.returns, RETURNS)
    close(result.advantages, RETURNS)
    result = PRIME(**HAND)(prime_batch())
    close(result.returns, RETURNS)
    close(result.advantages, WHITENED)
    assert result.diagnostics["prime/process_scale"] == 1.0
    # the mean raw process reward over the 11 trained tokens: 0.6 / 11
    assert result.diagnostics["prime/process_reward"] == pytest.approx(0.6 / 11)


def test_worked_example_with_the_recipe_settings():
    result = PRIME()(prime_batch())
    close(result.returns, DEFAULT_RETURNS, atol=1e-4)
    close(result.advantages, DEFAULT_ADVANTAGES)
    assert result.diagnostics["prime/process_scale"] == pytest.approx(0.5 + 1e-6, abs=1e-9)


def test_the_last_tokens_process_reward_counts_as_in_the_authors_code():
    # verl's PRIME recipe would zero the last token's r (0.4 and −0.4), leaving every return 0 here.
    result = PRIME(**HAND, whiten=False)(prime_batch([0.0, 0.0], [[0.0, 0.4], [0.0, -0.4]], [0, 0],
                                                     [[1, 1], [1, 1]]))
    # m = [0.2, −0.2] with group mean 0, so r̃ = 2·r = [0, ±0.8] and the sums to go are ±0.8 on both tokens.
    close(result.returns, [[0.8, 0.8], [-0.8, -0.8]])


def test_coefficients_weigh_the_two_terms():
    outcome = PRIME(outcome_coef=1.0, process_coef=0.0, normalize_process=False, whiten=False)(prime_batch())
    process = PRIME(outcome_coef=0.0, process_coef=1.0, normalize_process=False, whiten=False)(prime_batch())
    mask = torch.tensor(MASK, dtype=torch.float64)
    close(outcome.returns, torch.tensor([0.5, 0.0, -1.0, 0.0, 0.5], dtype=torch.float64)[:, None] * mask)
    close(outcome.returns + process.returns, RETURNS)
    mixed = PRIME(outcome_coef=2.0, process_coef=3.0, normalize_process=False, whiten=False)(prime_batch())
    close(mixed.returns, 2 * outcome.returns + 3 * process.returns)


def test_the_process_baseline_is_the_code_form_of_leave_one_out():
    # r̃_{i,t} = r_{i,t} − mean_{j≠i} m_j − (m_i − r_{i,t})/(K−1), summed over a row: n_i·(m_i − mean_{j≠i} m_j)
    r = torch.tensor([[0.1, -0.2, 0.4], [0.3, 0.1, 0.0], [-0.5, 0.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor(MASK, dtype=torch.float64)[[0, 2, 4]]
    m = (r * mask).sum(-1) / mask.sum(-1)
    got = leave_one_out(r, m, torch.zeros(3, dtype=torch.long)) * mask
    for i in range(3):
        others = m[torch.arange(3) != i].mean()
        close(got[i], (r[i] - others - (m[i] - r[i]) / 2) * mask[i])
        close(got[i].sum(), mask[i].sum() * (m[i] - others))


def test_singleton_group_keeps_its_rewards_and_equal_groups_give_zero():
    # a group of one: no baseline (K/(K−1) → 1, mean 0), as rloo
    single = PRIME(**HAND, whiten=False)(prime_batch([1.0], [[0.1, 0.2, PAD]], [0], [[1, 1, 0]]))
    close(single.returns, [[1.0 + 0.3, 1.0 + 0.2, 0.0]])
    # two identical responses: the outcome term is 0 and each whole response's process sum to go is 0, but the
    # token-wise map keeps a token's deviation from the group mean 0.15: r̃ = 2·([0.1, 0.2] − 0.15) = [−0.1, 0.1]
    equal = PRIME(**HAND, whiten=False)(prime_batch([1.0, 1.0], [[0.1, 0.2], [0.1, 0.2]], [0, 0], [[1, 1], [1, 1]]))
    close(equal.returns, [[0.0, 0.1], [0.0, 0.1]])
    flat = PRIME(**HAND, whiten=False)(prime_batch([0.0, 0.0], [[0.3, 0.3], [0.3, 0.3]], [0, 0], [[1, 1], [1, 1]]))
    close(flat.returns, [[0.0, 0.0], [0.0, 0.0]])  # equal outcomes and equal constant process rewards: all 0
    assert torch.equal(PRIME(**HAND)(prime_batch([1.0], [[0.5]], [0], [[1]])).advantages,
                       torch.tensor([[1.5]], dtype=torch.float64))  # one trained token: not whitened


def test_masked_tokens_are_never_read():
    poisoned = [row[:] for row in PROCESS]
    poisoned[1][2], poisoned[4][1], poisoned[4][2] = float("nan"), float("inf"), -1e9
    result = PRIME(**HAND)(prime_batch(process=poisoned))
    close(result.advantages, WHITENED)
    assert (result.advantages[torch.tensor(MASK) == 0] == 0).all()


@pytest.mark.parametrize("where", ["process", "outcome"])
def test_non_finite_rewards_are_refused(where):
    batch = prime_batch()
    if where == "process":
        batch.extras["process_rewards"][0, 1] = float("nan")
    else:
        batch.rewards[2, 0] = float("inf")
    with pytest.raises(ValueError, match="prime: .*non-finite"):
        PRIME()(batch)


def test_missing_or_misshapen_input_is_named():
    batch = prime_batch()
    del batch.extras["process_rewards"]
    with pytest.raises(ValueError, match=r"prime needs the input 'process_rewards' \[5, 3\], got None"):
        PRIME()(batch)
    batch.extras["process_rewards"] = torch.zeros(5, 2)
    with pytest.raises(ValueError, match=r"got \[5, 2\]"):
        PRIME()(batch)


def test_registration_and_settings():
    est = ADVANTAGES.build({"name": "prime"})
    assert isinstance(est, PRIME) and est.needs() == {"process_rewards"}
    assert (est.outcome_coef, est.process_coef, est.normalize_process, est.whiten) == (5.0, 5.0, True, True)
    assert "arXiv:2502.01456" in PRIME.paper and PRIME.provenance == "CODE"
    for bad in ({"outcome_coef": -1.0}, {"process_coef": float("nan")}, {"gamma": 0.9}):
        with pytest.raises(ConfigError, match="advantage"):
            ADVANTAGES.build({"name": "prime", **bad})
