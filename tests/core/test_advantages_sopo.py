"""SOPO on step rows: the spec's sopo_scaling example (rows in any order), the scaling law, degenerate groups,
masking and input validation."""
import pytest
import torch

from polo.core.advantages.sopo import SOPO
from polo.core.registry import ADVANTAGES, ConfigError

from .helpers import build_batch, close

# sopo_scaling: R = [0.9, 0.6, 0.2, 0.9], k = [1, 2, 3, 3] student attempts (k − 1 hinted turns).
REWARD = [0.9, 0.6, 0.2, 0.9]
ATTEMPTS = [1, 2, 3, 3]
PLAIN = [0.7538, -0.1508, -1.3568, 0.7538]
SCALED = [0.7538, -0.1508, -1.3568, 0.4824]


def sopo_batch(reward=REWARD, attempts=ATTEMPTS, group=None, mask=None, perm=None, traj_ids=None):
    """Trajectory i has ``attempts[i]`` rows; every row but its last carries a hint."""
    traj = [i for i, k in enumerate(attempts) for _ in range(k)]
    hint = [float(t < k - 1) for k in attempts for t in range(k)]
    N = len(traj)
    mask = torch.ones(N, 2, dtype=torch.long) if mask is None else torch.as_tensor(mask)
    groups = [0] * N if group is None else [group[i] for i in traj]
    batch = build_batch([float(reward[i]) for i in traj], groups, mask=mask)
    ids = traj if traj_ids is None else [traj_ids[i] for i in traj]
    batch.extras.update(traj=torch.tensor(ids), hint=torch.tensor(hint, dtype=torch.float64))
    return batch if perm is None else batch.select(perm)


def per_row(values, attempts=ATTEMPTS):
    return torch.tensor([v for v, k in zip(values, attempts) for _ in range(k)], dtype=torch.float64)


def test_sopo_scaling_in_any_row_order():
    for order in (torch.arange(9), torch.randperm(9, generator=torch.Generator().manual_seed(2))):
        out = SOPO()(sopo_batch(perm=order))
        close(out.advantages, per_row(SCALED)[order][:, None].expand(9, 2))
    d = SOPO()(sopo_batch()).diagnostics
    close(torch.tensor([d["sopo/mean_attempts"], d["sopo/hinted_frac"], d["sopo/discounted_frac"],
                        d["sopo/hinted_turn_frac"]]), [2.25, 0.75, 0.25, 5 / 9])  # 5 of the 9 rows hinted


def test_lambda_one_is_trajectory_grpo_and_lambda_law():
    close(SOPO(lambda_s=1.0)(sopo_batch()).advantages[:, 0], per_row(PLAIN))
    close(SOPO(lambda_s=0.5)(sopo_batch()).advantages[:, 0], per_row([0.7538, -0.1508, -1.3568, 0.7538 / 4]))
    # Hints on any turn count, in any position (here the last row of τ3 carries the hint, not the first).
    batch = sopo_batch()
    batch.extras["hint"] = torch.tensor([0, 1, 0, 1, 1, 0, 0, 1, 1], dtype=torch.float64)
    close(SOPO()(batch).advantages[:, 0], per_row(SCALED))


def test_all_equal_group_single_trajectory_and_ids():
    for dtype in (torch.float32, torch.float64):
        batch = sopo_batch(reward=[0.5] * 4)
        batch.rewards = batch.rewards.to(dtype)
        batch.reward_weights = batch.reward_weights.to(dtype)
        adv = SOPO()(batch).advantages
        assert adv.dtype == dtype and (adv == 0).all()
    # A group of one trajectory: mean 0, std 1 → A = R, discounted for its two hints.
    close(SOPO()(sopo_batch(reward=[0.5], attempts=[3])).advantages[:, 0], [0.5 * 0.64] * 3)
    close(SOPO()(sopo_batch(reward=[-0.5], attempts=[3])).advantages[:, 0], [-0.5] * 3)
    # Arbitrary trajectory ids and two independent groups.
    out = SOPO()(sopo_batch(REWARD * 2, ATTEMPTS * 2, group=[1] * 4 + [0] * 4, traj_ids=[40, 3, 17, 8, 9, 1, 2, 0]))
    close(out.advantages[:, 0], torch.cat([per_row(SCALED)] * 2))


def test_masked_tokens_zero_and_deterministic():
    mask = [[1, 1], [1, 0], [0, 0], [1, 1], [0, 1], [1, 1], [1, 1], [1, 0], [0, 0]]
    adv = SOPO()(sopo_batch(mask=mask)).advantages
    m = torch.tensor(mask)
    assert (adv[m == 0] == 0).all()
    close(adv[m == 1], per_row(SCALED)[:, None].expand(9, 2)[m == 1])
    batch = sopo_batch(perm=torch.tensor([8, 1, 4, 0, 7, 2, 6, 3, 5]))
    a, b = SOPO()(batch), SOPO()(batch)
    assert torch.equal(a.advantages, b.advantages) and a.diagnostics == b.diagnostics


def test_bad_inputs_are_refused():
    batch = sopo_batch()
    batch.rewards[3, 0] = float("nan")
    with pytest.raises(ValueError, match="sopo.*episode rewards"):
        SOPO()(batch)
    for bad, match in ((float("nan"), "non-finite"), (2.0, "'hint' must hold only 0.0 and 1.0")):
        batch = sopo_batch()
        batch.extras["hint"][0] = bad
        with pytest.raises(ValueError, match=match):
            SOPO()(batch)
    batch = sopo_batch()
    del batch.extras["hint"]
    with pytest.raises(ValueError, match="sopo needs the step-row input 'hint'.*has none"):
        SOPO()(batch)
    batch = sopo_batch()
    batch.group = torch.tensor([0] * 8 + [1])
    with pytest.raises(ValueError, match="sopo.*spans several groups"):
        SOPO()(batch)


def test_config():
    est = ADVANTAGES.build({"name": "sopo"})
    assert isinstance(est, SOPO) and (est.lambda_s, est.eps) == (0.8, 1e-6)
    assert est.needs() == {"traj", "hint"}
    for bad in ({"lambda_s": 1.5}, {"lambda_s": -0.1}, {"eps": 0}, {"k_max": 3}):
        with pytest.raises(ConfigError, match="advantage"):
            ADVANTAGES.build({"name": "sopo", **bad})


# ---- mutation-testing kills


def test_a_one_row_hinted_success_is_discounted_and_counted():
    # τ0: one row, hinted (k = 2), R = 0.9; τ1: one row, R = 0.2. A = ±0.35/0.49497 = ±0.70711 (std_u of 0.9, 0.2);
    # τ0 is scaled once: 0.70711·0.8 = 0.56569, and counted in discounted_frac although it has a single row
    batch = sopo_batch(reward=[0.9, 0.2], attempts=[1, 1])
    batch.extras["hint"] = torch.tensor([1.0, 0.0], dtype=torch.float64)
    out = SOPO()(batch)
    close(out.advantages[:, 0], [0.5**0.5 * 0.8, -(0.5**0.5)])
    assert out.diagnostics == {"sopo/mean_attempts": 1.5, "sopo/hinted_frac": 0.5, "sopo/discounted_frac": 0.5,
                               "sopo/hinted_turn_frac": 0.5}


def test_a_zero_advantage_is_not_counted_as_discounted():
    # all rewards equal: every A is exactly 0, hinted or not; nothing is scaled down
    d = SOPO()(sopo_batch(reward=[0.5] * 4)).diagnostics
    assert d["sopo/discounted_frac"] == 0.0 and d["sopo/hinted_frac"] == 0.75


def test_an_empty_batch_reports_zero_metrics():
    batch = sopo_batch(reward=[], attempts=[])
    batch.group = torch.zeros(0, dtype=torch.long)
    batch.extras["traj"] = torch.zeros(0, dtype=torch.long)
    out = SOPO()(batch)
    assert out.advantages.shape == (0, 2)
    assert out.diagnostics == {"sopo/mean_attempts": 0.0, "sopo/hinted_frac": 0.0, "sopo/discounted_frac": 0.0,
                               "sopo/hinted_turn_frac": 0.0}


def test_input_errors_name_the_estimator():
    batch = sopo_batch()
    del batch.extras["traj"]
    with pytest.raises(ValueError, match="^advantage sopo needs the step-row input 'traj'"):
        SOPO()(batch)
    batch = sopo_batch()
    batch.extras["hint"][0] = 2.0
    with pytest.raises(ValueError, match="^advantage sopo: the step-row input 'hint' must hold only 0.0 and 1.0"):
        SOPO()(batch)
