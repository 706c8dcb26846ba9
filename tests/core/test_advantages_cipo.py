"""CIPO on step rows: the spec's cipo_adv example (rows shuffled), edge cases and input validation."""
import pytest
import torch

from polo.methods.cipo.advantage import CIPO
from polo.core.registry import ADVANTAGES, ConfigError

from .helpers import build_batch, close

# cipo_adv (multi-turn spec §15 d): base outcomes R = [1, 0, 1, 0], R^cf = [0, 1, 1, none]. Trajectory 0 has
# three turns, the others two; the decision turns are traj 0 step 1, traj 1 step 0, traj 2 step 1.
TRAJ = [0, 0, 0, 1, 1, 2, 2, 3, 3]
OUTCOME = [1, 1, 1, 0, 0, 1, 1, 0, 0]
DECISION = [0, 1, 0, 1, 0, 0, 1, 0, 0]
DELTA = [0, 1, 0, -1, 0, 0, 0, 0, 0]
EXPECTED = [0.866, 1.366, 0.866, -1.366, -0.866, 0.866, 0.866, -0.866, -0.866]
A_TRAJ = [0.866, 0.866, 0.866, -0.866, -0.866, 0.866, 0.866, -0.866, -0.866]


def cipo_batch(outcome=OUTCOME, traj=TRAJ, decision=DECISION, delta=DELTA, group=None, mask=None, perm=None,
               dtype=torch.float64):
    N = len(traj)
    mask = torch.ones(N, 3, dtype=torch.long) if mask is None else torch.as_tensor(mask)
    batch = build_batch(outcome, [0] * N if group is None else group, mask=mask)
    batch.rewards = batch.rewards.to(dtype)
    batch.reward_weights = batch.reward_weights.to(dtype)
    batch.extras.update(traj=torch.tensor(traj), cf_decision=torch.tensor(decision, dtype=dtype),
                        cf_delta=torch.tensor(delta, dtype=dtype))
    return batch if perm is None else batch.select(perm)


def rows(est, batch):
    return est(batch).advantages[:, 0]


def test_cipo_adv_in_any_row_order():
    perm = torch.randperm(9, generator=torch.Generator().manual_seed(3))
    for order in (torch.arange(9), perm):
        out = CIPO()(cipo_batch(perm=order))
        close(out.advantages, torch.tensor(EXPECTED)[order][:, None].expand(9, 3))
        close(torch.tensor(out.diagnostics["cipo/decision_frac"]), 0.75)
        close(torch.tensor(out.diagnostics["cipo/delta_mean"]), 0.0)
        close(torch.tensor(out.diagnostics["cipo/delta_abs_mean"]), 2 / 3)


def test_lam_cf_scales_the_gain_and_zero_is_trajectory_grpo():
    batch = cipo_batch()
    close(rows(CIPO(lam_cf=2.0), batch), torch.tensor(A_TRAJ) + 2.0 * torch.tensor(DELTA, dtype=torch.float64))
    close(rows(CIPO(lam_cf=0), batch), A_TRAJ)
    assert CIPO(lam_cf=0).needs() == {"traj"} and CIPO().needs() == {"traj", "cf_decision", "cf_delta"}
    del batch.extras["cf_decision"], batch.extras["cf_delta"]
    close(rows(CIPO(lam_cf=0), batch), A_TRAJ)


def test_trajectory_stats_use_one_value_per_trajectory():
    # Trajectory 0 has three rows, the others two: step-weighted statistics would differ (mean 4/9, not 1/2).
    from polo.core.advantages import GRPO
    per_traj = rows(GRPO(), build_batch([1.0, 0.0, 1.0, 0.0]))
    close(rows(CIPO(lam_cf=0), cipo_batch()), per_traj[torch.tensor(TRAJ)])


def test_masked_tokens_get_exactly_zero():
    mask = [[1, 1, 0], [1, 0, 0], [0, 0, 0]] + [[1, 1, 1]] * 6
    adv = CIPO()(cipo_batch(mask=mask)).advantages
    m = torch.tensor(mask)
    assert (adv[m == 0] == 0).all()
    close(adv[1, 0], 1.366)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_all_equal_outcomes_leave_only_the_gain(dtype):
    batch = cipo_batch(outcome=[1.0] * 9, dtype=dtype)
    adv = CIPO()(batch).advantages
    assert adv.dtype == dtype
    assert (adv[torch.tensor(DELTA) == 0] == 0).all()
    close(adv[:, 0], 0.5 * torch.tensor(DELTA, dtype=dtype))


def test_single_trajectory_group():
    # One trajectory: mean 0, std 1 → A^traj = R (as grpo's singleton groups).
    batch = cipo_batch(outcome=[0.4, 0.4], traj=[5, 5], decision=[1, 0], delta=[0.2, 0])
    close(rows(CIPO(), batch), [0.4 + 0.5 * 0.2, 0.4])


def test_groups_are_independent():
    batch = cipo_batch(outcome=OUTCOME * 2, traj=TRAJ + [t + 10 for t in TRAJ], decision=DECISION * 2,
                       delta=DELTA * 2, group=[3] * 9 + [1] * 9)
    close(rows(CIPO(), batch), EXPECTED * 2)


def test_deterministic():
    batch = cipo_batch(perm=torch.tensor([8, 2, 5, 0, 7, 1, 4, 6, 3]))
    a, b = CIPO()(batch), CIPO()(batch)
    assert torch.equal(a.advantages, b.advantages) and a.diagnostics == b.diagnostics


@pytest.mark.parametrize("name", ["traj", "cf_decision", "cf_delta"])
def test_missing_input_is_named(name):
    batch = cipo_batch()
    del batch.extras[name]
    with pytest.raises(ValueError, match=rf"cipo needs the step-row input '{name}' \[9\].*has none"):
        CIPO()(batch)


@pytest.mark.parametrize("name, value, match", [
    ("cf_delta", torch.tensor([float("nan")] + [0.0] * 8), "non-finite"),
    ("cf_decision", torch.tensor([float("inf")] + [0.0] * 8), "non-finite"),
    ("traj", torch.zeros(9), "dtype torch.float32"),
    ("cf_decision", torch.tensor([0.5] + [0.0] * 8), "0.0 or 1.0"),
    ("cf_delta", torch.tensor([0.3] + [0.0] * 8), "no decision turn"),
    ("cf_decision", torch.tensor([1.0, 1, 0, 1, 0, 0, 1, 0, 0]), "several decision rows"),
])
def test_malformed_input_is_refused(name, value, match):
    batch = cipo_batch()
    batch.extras[name] = value.double() if value.is_floating_point() and name != "traj" else value
    with pytest.raises(ValueError, match=match):
        CIPO()(batch)


def test_non_finite_episode_reward_and_split_trajectory_are_refused():
    batch = cipo_batch()
    batch.rewards[0, 0] = float("nan")
    with pytest.raises(ValueError, match="episode rewards"):
        CIPO()(batch)
    with pytest.raises(ValueError, match="spans several groups"):
        CIPO()(cipo_batch(group=[0, 1] + [0] * 7))


def test_config_fields_are_validated_and_train_cf_is_not_supported():
    est = ADVANTAGES.build({"name": "cipo", "lam_cf": 1.0})
    assert isinstance(est, CIPO) and est.eps == 1e-6 and CIPO().lam_cf == 0.5
    for bad in ({"lam_cf": -1}, {"eps": 0}, {"train_cf": True}):
        with pytest.raises(ConfigError, match="advantage"):
            ADVANTAGES.build({"name": "cipo", **bad})
