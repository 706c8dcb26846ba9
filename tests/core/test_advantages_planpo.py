"""PlanPO on step rows: the spec's planpo_basic example (rows in any order), the success-above-failure
invariant on random groups, degenerate groups, masking and input validation."""
import pytest
import torch

from polo.core.advantages.planpo import PlanPO
from polo.core.registry import ADVANTAGES, ConfigError

from .helpers import build_batch, close

# planpo_basic: o = [1, 1, 1, 0], T = [3, 5, 4, 6]; turn lengths (action tokens) of every row.
OUTCOME = [1, 1, 1, 0]
LENGTHS = [[12, 8, 10], [20, 15, 10, 9, 6], [10, 10, 10, 10], [7, 3, 5, 9, 2, 4]]
EXPECTED = [[0.7318, 0.8836, 0.8165], [0.1521, 0.1584, 0.1982, 0.2074, 0.2227], [0.5074] * 4, [-1.4556] * 6]


def planpo_batch(outcome=OUTCOME, lengths=LENGTHS, group=None, reward=None, width=None, perm=None):
    """One step row per turn; ``lengths[i][t]`` valid tokens on row (i, t); ``correct`` and the episode reward
    (default: the outcome) written on every row of the trajectory."""
    traj = [i for i, ls in enumerate(lengths) for _ in ls]
    step = [t for ls in lengths for t in range(len(ls))]
    flat = [n for ls in lengths for n in ls]
    width = width or max(flat)
    mask = (torch.arange(width)[None] < torch.tensor(flat)[:, None]).long()
    reward = outcome if reward is None else reward
    groups = [0] * len(traj) if group is None else [group[i] for i in traj]
    batch = build_batch([float(reward[i]) for i in traj], groups, mask=mask)
    batch.extras.update(traj=torch.tensor(traj), step=torch.tensor(step),
                        correct=torch.tensor([float(outcome[i]) for i in traj], dtype=torch.float64))
    return batch if perm is None else batch.select(perm)


def flat(rows):
    return torch.tensor([x for r in rows for x in r], dtype=torch.float64)


def test_planpo_basic_in_any_row_order():
    n = sum(map(len, LENGTHS))
    for order in (torch.arange(n), torch.randperm(n, generator=torch.Generator().manual_seed(3))):
        batch = planpo_batch(perm=order)
        out = PlanPO()(batch)
        m = batch.mask
        close(out.advantages, flat(EXPECTED)[order][:, None] * m)
        assert (out.advantages[m == 0] == 0).all()
    d = PlanPO()(planpo_batch()).diagnostics
    assert d["planpo/success_frac"] == 0.75 and d["planpo/coarse_active_frac"] == 1.0
    close(torch.tensor(d["planpo/scaled_row_frac"]), 12 / 18)
    close(torch.tensor(d["planpo/coarse_abs_mean"]), 2 / 3)


def test_planpo_basic_intermediate_values():
    # A (trajectory level) = the coarse-shaped z-score: β = 0 switches the fine factor off.
    close(PlanPO(beta=0)(planpo_batch()).advantages[:, 0],
          flat([[0.7808] * 3, [0.1896] * 5, [0.4852] * 4, [-1.4556] * 6]))
    # α = β = 0: plain trajectory-level GRPO on the outcomes.
    close(PlanPO(alpha=0, beta=0)(planpo_batch()).advantages[:, 0],
          flat([[0.5] * 3, [0.5] * 5, [0.5] * 4, [-1.5] * 6]))


@pytest.mark.parametrize("seed", range(20))
def test_every_success_above_every_failure(seed):
    g = torch.Generator().manual_seed(seed)
    G = int(torch.randint(2, 9, (1,), generator=g))
    outcome = torch.randint(0, 2, (G,), generator=g).tolist()
    outcome[0], outcome[1] = 1, 0  # at least one of each
    lengths = [torch.randint(1, 30, (int(torch.randint(1, 8, (1,), generator=g)),), generator=g).tolist()
               for _ in range(G)]
    alpha, beta = float(torch.rand(1, generator=g)) * 0.49, float(torch.rand(1, generator=g))
    batch = planpo_batch(outcome, lengths)
    adv = PlanPO(alpha=alpha, beta=beta)(batch).advantages[:, 0]
    succ = batch.extras["correct"] == 1
    assert adv[succ].min() > adv[~succ].max()
    assert (adv[~succ] < 0).all()


def test_all_equal_groups_give_zero():
    for dtype in (torch.float32, torch.float64):
        for o in (1, 0):  # every trajectory succeeds (same turn count) / every one fails
            batch = planpo_batch([o] * 3, [[4, 9], [1, 2], [7, 7]])
            batch.rewards = batch.rewards.to(dtype)
            batch.reward_weights = batch.reward_weights.to(dtype)
            adv = PlanPO()(batch).advantages
            assert adv.dtype == dtype and (adv == 0).all()


def test_single_trajectory_and_single_success():
    # One successful trajectory: A = 1/(1 + eps) (singleton group: mean 0, std 1), no coarse term (|S| < 2);
    # its own turns form the fine pool: lengths [2, 6] → f = ±0.7071.
    out = PlanPO()(planpo_batch([1], [[2, 6]])).advantages[:, 0]
    f = torch.tensor([0.7071, -0.7071], dtype=torch.float64)
    close(out, 1 + 0.2 * torch.tanh(f))
    # One success among failures: coarse term 0, A = z-score of [1, 0, 0]; a one-turn success pool → f = 0.
    out = PlanPO()(planpo_batch([1, 0, 0], [[5], [2, 3], [9]])).advantages[:, 0]
    close(out, [1.1547, -0.5774, -0.5774, -0.5774])


def test_groups_are_independent_and_masked_rows_zero():
    outcome = OUTCOME * 2
    lengths = LENGTHS * 2
    out = PlanPO()(planpo_batch(outcome, lengths, group=[5] * 4 + [2] * 4)).advantages[:, 0]
    close(out, torch.cat([flat(EXPECTED)] * 2))
    # Padding tokens wider than any row stay exactly 0.
    batch = planpo_batch(width=25)
    adv = PlanPO()(batch).advantages
    assert (adv[batch.mask == 0] == 0).all()


def test_bool_correct_and_episode_reward_not_used():
    batch = planpo_batch(reward=[5.0, -1.0, 0.3, 2.0])
    batch.extras["correct"] = batch.extras["correct"].bool()
    close(PlanPO()(batch).advantages[:, 0], flat(EXPECTED))


def test_deterministic():
    batch = planpo_batch(perm=torch.randperm(18, generator=torch.Generator().manual_seed(1)))
    a, b = PlanPO()(batch), PlanPO()(batch)
    assert torch.equal(a.advantages, b.advantages) and a.diagnostics == b.diagnostics


def test_bad_inputs_are_refused():
    batch = planpo_batch()
    del batch.extras["correct"]
    with pytest.raises(ValueError, match="planpo needs the input 'correct'.*has none"):
        PlanPO()(batch)
    for bad, match in ((float("nan"), "other than 0 and 1"), (0.5, "other than 0 and 1")):
        batch = planpo_batch()
        batch.extras["correct"][0] = bad
        with pytest.raises(ValueError, match=match):
            PlanPO()(batch)
    batch = planpo_batch()
    batch.extras["correct"][1] = 0.0  # τ0 succeeds on rows 0 and 2 only
    with pytest.raises(ValueError, match="same on every row"):
        PlanPO()(batch)
    batch = planpo_batch()
    batch.extras["correct"] = batch.extras["correct"][:5]
    with pytest.raises(ValueError, match=r"shape \(5,\)"):
        PlanPO()(batch)
    batch = planpo_batch()
    del batch.extras["step"]
    with pytest.raises(ValueError, match="planpo needs the step-row input 'step'"):
        PlanPO()(batch)
    batch = planpo_batch()
    batch.extras["step"][1] = 0
    with pytest.raises(ValueError, match="planpo.*exactly once"):
        PlanPO()(batch)
    batch = planpo_batch()
    batch.group = torch.tensor([1] + [0] * 17)  # τ0's first row in another task group
    with pytest.raises(ValueError, match="planpo.*spans several groups"):
        PlanPO()(batch)


def test_config():
    est = ADVANTAGES.build({"name": "planpo"})
    assert isinstance(est, PlanPO) and (est.alpha, est.beta, est.eps) == (0.2, 0.2, 1e-6)
    assert est.needs() == {"traj", "step", "correct"}
    for bad in ({"alpha": 0.5}, {"beta": 1.5}, {"alpha": -0.1}, {"eps": 0}, {"gamma": 1}):
        with pytest.raises(ConfigError, match="advantage"):
            ADVANTAGES.build({"name": "planpo", **bad})


# ---- mutation-testing kills


def test_two_successes_shape_coarse_and_fine_with_a_large_eps():
    # successes τ0 (1 turn, ℓ = [2]) and τ1 (3 turns, ℓ = [2, 4, 6]), failure τ2 (1 turn); α = 0.4, β = 1, eps = 0.5
    # coarse: T_S = [1, 3], mean 2, std_u √2: e = ±1/(√2 + 0.5) = ±0.52241, tanh ±0.47964
    # R' = [1.19186, 0.80814, 0]: mean 0.66667, std_u 0.60839, A = (R' − mean)/1.10839 = [0.47383, 0.12764, −0.60147]
    # fine pool ℓ = [2, 2, 4, 6]: mean 3.5, std_u 1.91485, f = (3.5 − ℓ)/2.41485 = [0.62116, 0.62116, −0.20705, −1.03526]
    # A_t = A·(1 + tanh f): 0.47383·1.55186; 0.12764·[1.55186, 0.79586, 0.22443]
    out = PlanPO(alpha=0.4, beta=1.0, eps=0.5)(planpo_batch([1, 1, 0], [[2], [2, 4, 6], [3]]))
    close(out.advantages[:, 0], [0.73532, 0.19808, 0.10158, 0.02865, -0.60147])
    d = out.diagnostics
    assert d["planpo/coarse_active_frac"] == 1.0  # both successes are in a group with two
    close(torch.tensor(d["planpo/coarse_abs_mean"]), 0.52241)
    assert d["planpo/success_frac"] == pytest.approx(2 / 3)


def test_a_success_below_the_group_mean_is_not_scaled():
    # three successes, turns [1, 1, 2]: the two-turn one has R' < mean R', so A < 0 and no fine factor applies
    batch = planpo_batch([1, 1, 1], [[5], [5], [2, 9]])
    a, plain = PlanPO(beta=1.0)(batch), PlanPO(beta=0.0)(batch)
    assert plain.advantages[2, 0] < 0
    close(a.advantages[2:, 0], plain.advantages[2:, 0])
    assert a.diagnostics["planpo/scaled_row_frac"] == 0.5  # rows of τ0 and τ1 of 4


def test_a_zero_advantage_is_not_counted_as_scaled():
    # two successes with one turn each: every R' = 1, A = 0 on every row
    out = PlanPO()(planpo_batch([1, 1], [[3], [5]]))
    assert (out.advantages == 0).all()
    assert out.diagnostics == {"planpo/success_frac": 1.0, "planpo/coarse_active_frac": 1.0,
                               "planpo/scaled_row_frac": 0.0, "planpo/coarse_abs_mean": 0.0}


def test_an_empty_batch_reports_zero_metrics():
    batch = build_batch(torch.zeros(0, 1), torch.zeros(0, dtype=torch.long), mask=torch.zeros(0, 2))
    empty = torch.zeros(0, dtype=torch.long)
    batch.extras.update(traj=empty, step=empty, correct=torch.zeros(0, dtype=torch.float64))
    out = PlanPO()(batch)
    assert out.advantages.shape == (0, 2)
    assert out.diagnostics == {"planpo/success_frac": 0.0, "planpo/coarse_active_frac": 0.0,
                               "planpo/scaled_row_frac": 0.0, "planpo/coarse_abs_mean": 0.0}


def test_missing_inputs_are_named_in_full():
    batch = planpo_batch()
    del batch.extras["traj"]
    with pytest.raises(ValueError, match="^advantage planpo needs the step-row input 'traj'"):
        PlanPO()(batch)
    batch = planpo_batch()
    del batch.extras["correct"]
    with pytest.raises(ValueError, match=r"^advantage planpo needs the input 'correct' \[18\] \(1\.0 on every row of "
                                         r"an episode that succeeded, else 0\.0\), written by the engine"):
        PlanPO()(batch)
