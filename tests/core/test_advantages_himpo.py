"""HiMPO on step rows: the spec's himpo_basic example (rows in any order), normalization options, single and
absent memory writes, independence of groups, masking and input validation."""
import pytest
import torch

from polo.core.advantages.himpo import HiMPO
from polo.core.registry import ADVANTAGES, ConfigError

from .helpers import build_batch, close

# himpo_basic: two trajectories (outcomes 1, 0), each with two memory writes then an answer turn.
TRAJ = [0, 0, 0, 1, 1, 1]
STEP = [0, 1, 2, 0, 1, 2]
WRITE = [1, 1, 0, 1, 1, 0]
UTILITY = [0.8, -0.1, 0.0, 0.5, -0.6, 0.0]
RELEVANCE = [1.0, 0.0, 0.0, 0.0, 0.5, 0.0]
EXPECTED = [1.3749, -0.3078, 0.7071, -0.0616, -1.0055, -0.7071]
CREDIT = [0.8, -0.02, 0.7071, 0.1, -0.36, -0.7071]  # normalize: false (memory rows keep c)


def himpo_batch(episode=(1, 1, 1, 0, 0, 0), traj=TRAJ, step=STEP, write=WRITE, utility=UTILITY,
                relevance=RELEVANCE, group=None, mask=None, perm=None):
    N = len(traj)
    mask = torch.ones(N, 3, dtype=torch.long) if mask is None else torch.as_tensor(mask)
    batch = build_batch(list(map(float, episode)), [0] * N if group is None else group, mask=mask)
    f64 = dict(dtype=torch.float64)
    batch.extras.update(traj=torch.tensor(traj), step=torch.tensor(step), memory_write=torch.tensor(write, **f64),
                        memory_utility=torch.tensor(utility, **f64), memory_relevance=torch.tensor(relevance, **f64))
    return batch if perm is None else batch.select(perm)


def test_himpo_basic_in_any_row_order():
    for order in (torch.arange(6), torch.tensor([5, 2, 4, 0, 3, 1])):
        out = HiMPO()(himpo_batch(perm=order))
        close(out.advantages, torch.tensor(EXPECTED)[order][:, None].expand(6, 3))
    d = HiMPO()(himpo_batch()).diagnostics
    assert d["himpo/memory_rows"] == 4.0
    close(torch.tensor([d["himpo/credit_mean"], d["himpo/relevance_mean"]]), [0.13, 0.375])


def test_without_normalization_memory_rows_get_the_credit():
    close(HiMPO(normalize=False)(himpo_batch()).advantages[:, 0], CREDIT)
    # h_min = 1: no hindsight filter, c = U.
    close(HiMPO(normalize=False, h_min=1.0)(himpo_batch()).advantages[:, 0], [0.8, -0.1, 0.7071, 0.5, -0.6, -0.7071])


def test_single_write_keeps_its_credit_and_no_write_is_grpo():
    # One memory write in the group: mean 0, std 1 → its credit (to the eps).
    out = HiMPO()(himpo_batch(write=[1, 0, 0, 0, 0, 0])).advantages[:, 0]
    close(out, [0.8, 0.7071, 0.7071, -0.7071, -0.7071, -0.7071])
    out = HiMPO()(himpo_batch(write=[0] * 6))
    close(out.advantages[:, 0], [0.7071] * 3 + [-0.7071] * 3)
    assert out.diagnostics["himpo/memory_rows"] == 0.0 and out.diagnostics["himpo/credit_mean"] == 0.0


def test_single_trajectory():
    batch = himpo_batch(episode=[0.4] * 3, traj=[7] * 3, step=[2, 0, 1], write=[0, 1, 1], utility=[0, 0.3, 0.3],
                        relevance=[0, 0.5, 1.0])
    # c = [0.18, 0.3]: mean 0.24, std_u 0.0849 → ∓0.7071; the answer row gets R = 0.4 (singleton group).
    close(HiMPO()(batch).advantages[:, 0], [0.4, -0.7071, 0.7071])


def test_all_equal_gives_zero():
    for dtype in (torch.float32, torch.float64):
        batch = himpo_batch(episode=[1.0] * 6, utility=[0.3, 0.3, 0, 0.3, 0.3, 0], relevance=[0.5, 0.5, 0, 0.5, 0.5, 0])
        batch.rewards = batch.rewards.to(dtype)
        batch.reward_weights = batch.reward_weights.to(dtype)
        adv = HiMPO()(batch).advantages
        assert adv.dtype == dtype and (adv == 0).all()


def test_groups_are_independent_and_masked_tokens_zero():
    twice = himpo_batch(episode=[1, 1, 1, 0, 0, 0] * 2, traj=TRAJ + [t + 2 for t in TRAJ], step=STEP * 2,
                        write=WRITE * 2, utility=UTILITY * 2, relevance=RELEVANCE * 2, group=[3] * 6 + [9] * 6)
    close(HiMPO()(twice).advantages[:, 0], EXPECTED * 2)
    mask = [[1, 1, 1], [1, 0, 0], [0, 0, 0], [1, 1, 0], [1, 1, 1], [0, 1, 1]]
    adv = HiMPO()(himpo_batch(mask=mask)).advantages
    m = torch.tensor(mask)
    assert (adv[m == 0] == 0).all()
    close(adv[m == 1], torch.tensor(EXPECTED)[:, None].expand(6, 3)[m == 1])


def test_deterministic():
    batch = himpo_batch(perm=torch.tensor([3, 1, 5, 0, 2, 4]))
    a, b = HiMPO()(batch), HiMPO()(batch)
    assert torch.equal(a.advantages, b.advantages) and a.diagnostics == b.diagnostics


@pytest.mark.parametrize("name, index, value, match", [
    ("memory_relevance", 0, 1.5, "'memory_relevance' must lie in"),
    ("memory_relevance", 1, -0.1, "'memory_relevance' must lie in"),
    ("memory_utility", 0, float("nan"), "'memory_utility'.*non-finite"),
    ("memory_write", 2, 0.5, "'memory_write' must hold only 0.0 and 1.0"),
])
def test_bad_inputs_are_refused(name, index, value, match):
    batch = himpo_batch()
    batch.extras[name][index] = value
    with pytest.raises(ValueError, match=match):
        HiMPO()(batch)


def test_missing_input_and_nan_reward_are_refused():
    batch = himpo_batch()
    del batch.extras["memory_relevance"]
    with pytest.raises(ValueError, match="himpo needs the step-row input 'memory_relevance'.*has none"):
        HiMPO()(batch)
    batch = himpo_batch()
    batch.rewards[0, 0] = float("inf")
    with pytest.raises(ValueError, match="himpo.*episode rewards"):
        HiMPO()(batch)
    with pytest.raises(ValueError, match="himpo.*exactly once"):
        HiMPO()(himpo_batch(step=[0, 1, 1, 0, 1, 2]))


def test_config():
    est = ADVANTAGES.build({"name": "himpo"})
    assert isinstance(est, HiMPO) and (est.h_min, est.normalize, est.eps) == (0.2, True, 1e-6)
    assert est.needs() == {"traj", "step", "memory_write", "memory_utility", "memory_relevance"}
    for bad in ({"h_min": 1.2}, {"h_min": -0.1}, {"normalize": "maybe"}, {"eps": 0}):
        with pytest.raises(ConfigError, match="advantage"):
            ADVANTAGES.build({"name": "himpo", **bad})


# ---- mutation-testing kills
def test_eps_reaches_the_memory_normalisation():
    # memory credits 0.8, −0.02, 0.1, −0.36: mean 0.13, std_u √(0.7124/3) = 0.487306; eps = 1 → 0.67/1.487306
    close(ADVANTAGES.build({"name": "himpo", "eps": 1.0})(himpo_batch()).advantages[0, 0], 0.450479)


def test_memory_metrics_and_a_batch_without_writes():
    metrics = HiMPO()(himpo_batch()).diagnostics
    # |A| of the memory rows 0, 1, 3, 4 of the worked example
    assert metrics["himpo/memory_adv_abs_mean"] == pytest.approx((1.3749 + 0.3078 + 0.0616 + 1.0055) / 4, abs=1e-4)
    none = HiMPO()(himpo_batch(write=[0] * 6)).diagnostics
    assert none["himpo/relevance_mean"] == 0.0 and none["himpo/memory_adv_abs_mean"] == 0.0


def test_a_non_binary_memory_write_names_himpo():
    batch = himpo_batch()
    batch.extras["memory_write"][2] = 0.5
    with pytest.raises(ValueError, match="^advantage himpo: the step-row input 'memory_write' must hold only"):
        HiMPO()(batch)
