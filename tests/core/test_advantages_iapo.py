"""IAPO on step rows: the spec's iapo_routing example (routing weights directly, and the estimator on a
singleton group and inside a larger group), mass preservation on random inputs, reachability, edge cases."""
import pytest
import torch

from polo.core.advantages.iapo import IAPO, routing_weights, support_reach
from polo.core.registry import ADVANTAGES, ConfigError

from .helpers import build_batch, close

# iapo_routing, 0-based turns: 0 find_user; 1 get_order uses o0; 2 list_items (never used); 3 cancel_order
# uses o1 and errors; 4 final reply uses o1 (support) and o3 (failed-use).
SUPPORT = [0, 0b1, 0, 0b10, 0b10]
FAILED = [0, 0, 0, 0, 0b1000]
ERROR = [0, 0, 0, 1, 0]
REACH = [True, True, False, False, True]
W_POS = [1.3333, 1.3333, 0.6667, 0.3333, 1.3333]
W_NEG = [0.7143, 0.7143, 0.7143, 1.4286, 1.4286]
A_POS = [1.6, 1.6, 0.8, 0.4, 1.6]
A_NEG = [-0.5714, -0.5714, -0.5714, -1.1429, -1.1429]


def iapo_batch(reward, traj, step, support, failed, error, group=None, mask=None, perm=None):
    """Step rows; ``reward[i]`` (per trajectory) on every row of trajectory i."""
    N = len(traj)
    mask = torch.ones(N, 2, dtype=torch.long) if mask is None else torch.as_tensor(mask)
    groups = [0] * N if group is None else [group[i] for i in traj]
    batch = build_batch([float(reward[i]) for i in traj], groups, mask=mask)
    batch.extras.update(traj=torch.tensor(traj), step=torch.tensor(step), uses_support=torch.tensor(support),
                        uses_failed=torch.tensor(failed), tool_error=torch.tensor(error, dtype=torch.float64))
    return batch if perm is None else batch.select(perm)


def example_batch(reward, perm=None, mask=None):
    return iapo_batch([reward], [0] * 5, list(range(5)), SUPPORT, FAILED, ERROR, perm=perm, mask=mask)


def test_reach_and_routing_weights_of_the_example():
    tinv, step = torch.zeros(5, dtype=torch.long), torch.arange(5)
    reach = support_reach(tinv, step, torch.tensor(SUPPORT), 1)
    assert reach.tolist() == REACH
    fail, used = torch.tensor(ERROR).bool(), torch.tensor(FAILED) != 0
    for a, w_exp in ((1.2, W_POS), (-0.8, W_NEG), (0.0, [1.0] * 5)):
        adv = torch.full((5,), a, dtype=torch.float64)
        w = routing_weights(adv, reach, fail, used, tinv, 1, 1.0, 1.0, 0.5)
        close(w, w_exp)
        close(adv * w, [a * x for x in w_exp])


@pytest.mark.parametrize("a, expected", [(1.2, A_POS), (-0.8, A_NEG)])
def test_iapo_routing_on_a_singleton_group_in_any_row_order(a, expected):
    # A group of one trajectory: mean 0, std 1, so its advantage is its reward (to 1e-6, the eps).
    for order in (torch.arange(5), torch.tensor([3, 0, 4, 2, 1])):
        batch = example_batch(a, perm=order)
        out = IAPO()(batch)
        close(out.advantages, torch.tensor(expected)[order][:, None].expand(5, 2))
        close(out.advantages[:, 0].sum(), 5 * a)


def test_iapo_routing_inside_a_group():
    # The example trajectory next to two one-turn trajectories; its z-score is that of R over [R, 0, 1].
    def batch(r):
        return iapo_batch([r, 0.0, 1.0], [0] * 5 + [1, 2], list(range(5)) + [0, 0], SUPPORT + [0, 0],
                          FAILED + [0, 0], ERROR + [0, 0])
    for r, w, z in ((2.0, W_POS, 1.0), (-1.0, W_NEG, -1.0)):  # [2, 0, 1] → z = +1; [−1, 0, 1] → z = −1
        out = IAPO()(batch(r)).advantages[:, 0]
        close(out[:5], [z * x for x in w])
        close(out[5:], [-z, 0.0] if r == 2.0 else [0.0, 1.0])


def test_reach_follows_chains_and_multiple_edges():
    # Turn 4 (last) uses o2 and o1; turn 2 uses o0; turn 1 uses nothing; turn 3 is used by nobody.
    reach = support_reach(torch.zeros(5, dtype=torch.long), torch.arange(5), torch.tensor([0, 0, 0b1, 0b1, 0b110]),
                          1)
    assert reach.tolist() == [True, True, True, False, True]
    # Two trajectories, rows interleaved: each last turn reaches only its own chain.
    tinv = torch.tensor([0, 1, 0, 1, 0, 1])
    step = torch.tensor([0, 0, 1, 1, 2, 2])
    reach = support_reach(tinv, step, torch.tensor([0, 0, 0b1, 0b1, 0, 0b10]), 2)
    assert reach.tolist() == [False, True, False, True, True, True]


@pytest.mark.parametrize("seed", range(10))
def test_total_advantage_is_preserved_per_trajectory(seed):
    g = torch.Generator().manual_seed(seed)
    n_traj = 7
    turns = torch.randint(1, 9, (n_traj,), generator=g)
    traj = torch.repeat_interleave(torch.arange(n_traj), turns)
    step = torch.cat([torch.arange(int(t)) for t in turns])
    below = (1 << step) - 1  # bits of the earlier turns
    support = torch.randint(0, 256, step.shape, generator=g) & below
    failed = torch.randint(0, 256, step.shape, generator=g) & below
    error = (torch.rand(step.shape, generator=g) < 0.3).long().tolist()
    reward = torch.randn(n_traj, generator=g, dtype=torch.float64).tolist()
    group = [0, 0, 0, 1, 1, 1, 1]
    perm = torch.randperm(len(traj), generator=g)
    batch = iapo_batch(reward, traj.tolist(), step.tolist(), support.tolist(), failed.tolist(), error, group=group,
                       perm=perm)
    est = IAPO(lambda_s=float(torch.rand(1, generator=g)) * 3, lambda_f=2.0, rho=0.3)
    adv = est(batch).advantages[:, 0]
    # Trajectory advantages: z-scores over the trajectories of each group.
    r = torch.tensor(reward, dtype=torch.float64)
    z = torch.cat([(r[:3] - r[:3].mean()) / (r[:3].std() + 1e-6), (r[3:] - r[3:].mean()) / (r[3:].std() + 1e-6)])
    tid = batch.extras["traj"]
    sums = torch.zeros(n_traj, dtype=torch.float64).index_add(0, tid, adv)
    close(sums, turns.double() * z, atol=1e-9)
    assert ((adv > 0) == (z[tid] > 0)).all()  # the sign of the trajectory advantage is kept on every turn


def test_zero_advantage_and_all_equal_group():
    batch = iapo_batch([1.0, 1.0], [0] * 5 + [1], list(range(5)) + [0], SUPPORT + [0], FAILED + [0], ERROR + [0])
    out = IAPO()(batch)
    assert (out.advantages == 0).all()
    assert out.diagnostics["iapo/weight_max"] == out.diagnostics["iapo/weight_min"] == 1.0


def test_single_turn_trajectory_keeps_its_advantage_and_masked_tokens_zero():
    out = IAPO()(iapo_batch([0.7], [0], [0], [0], [0], [1])).advantages
    close(out, [[0.7, 0.7]])
    mask = [[1, 1], [1, 0], [0, 0], [1, 1], [0, 1]]
    adv = IAPO()(example_batch(1.2, mask=mask)).advantages
    m = torch.tensor(mask)
    assert (adv[m == 0] == 0).all()
    close(adv[m == 1], torch.tensor(A_POS)[:, None].expand(5, 2)[m == 1])


def test_diagnostics_and_determinism():
    batch = example_batch(1.2, perm=torch.tensor([2, 4, 0, 1, 3]))
    a, b = IAPO()(batch), IAPO()(batch)
    assert torch.equal(a.advantages, b.advantages) and a.diagnostics == b.diagnostics
    d = a.diagnostics
    close(torch.tensor([d["iapo/weight_max"], d["iapo/weight_min"], d["iapo/reach_frac"], d["iapo/fail_frac"]]),
          [4 / 3, 1 / 3, 0.6, 0.2])


F64, I64 = torch.float64, torch.long


@pytest.mark.parametrize("name, value, dtype, match", [
    ("uses_support", [0, 0b10, 0, 0b10, 0b10], I64, "'uses_support' must be a non-negative bitmask"),  # turn 1: bit 1
    ("uses_failed", [0, 0, 0, 0, -1], I64, "'uses_failed' must be a non-negative bitmask"),
    ("uses_failed", [0, 0, 0, 0, 0b10000], I64, "'uses_failed'.*earlier turns"),  # its own turn
    ("tool_error", [0, 0, 0, 0.5, 0], F64, "'tool_error' must hold only 0.0 and 1.0"),
    ("tool_error", [0, 0, 0, float("nan"), 0], F64, "non-finite"),
    ("uses_support", [0, 1, 0, 2, 2], F64, "dtype torch.float64"),
])
def test_bad_inputs_are_refused(name, value, dtype, match):
    batch = example_batch(1.2)
    batch.extras[name] = torch.tensor(value, dtype=dtype)
    with pytest.raises(ValueError, match=match):
        IAPO()(batch)


def test_missing_input_nan_reward_and_bad_steps_are_refused():
    batch = example_batch(1.2)
    del batch.extras["uses_failed"]
    with pytest.raises(ValueError, match="iapo needs the step-row input 'uses_failed'.*has none"):
        IAPO()(batch)
    batch = example_batch(1.2)
    batch.rewards[2, 0] = float("nan")
    with pytest.raises(ValueError, match="iapo.*episode rewards"):
        IAPO()(batch)
    batch = example_batch(1.2)
    batch.extras["step"] = torch.tensor([0, 1, 2, 3, 5])
    with pytest.raises(ValueError, match="iapo.*exactly once"):
        IAPO()(batch)


def test_config():
    est = ADVANTAGES.build({"name": "iapo"})
    assert isinstance(est, IAPO) and (est.lambda_s, est.lambda_f, est.rho, est.eps) == (1.0, 1.0, 0.5, 1e-6)
    assert est.needs() == {"traj", "step", "tool_error", "uses_support", "uses_failed"}
    for bad in ({"rho": 0}, {"rho": 1.5}, {"lambda_s": -1}, {"lambda_f": -0.1}, {"eps": 0}):
        with pytest.raises(ConfigError, match="advantage"):
            ADVANTAGES.build({"name": "iapo", **bad})


# ---- mutation-testing kills


def test_routing_weights_are_computed_in_the_advantages_float64():
    # λ_s = 0.3 (not exact in float32), ρ = 0.5: ω = (1 + 0.3·reach)·(0.5 if fail else 1) = [1.3, 1.3, 1, 0.5, 1.3],
    # Σω = 5.4, w = 5·ω/5.4; float64 throughout (a float32 step would be off by ~1e-8)
    tinv = torch.zeros(5, dtype=torch.long)
    reach, fail = torch.tensor(REACH), torch.tensor(ERROR).bool()
    adv = torch.full((5,), 1.2, dtype=torch.float64)
    w = routing_weights(adv, reach, fail, torch.tensor(FAILED) != 0, tinv, 1, 0.3, 1.0, 0.5)
    assert w.dtype == torch.float64
    expected = torch.tensor([1.3, 1.3, 1.0, 0.5, 1.3], dtype=torch.float64) * 5 / 5.4
    torch.testing.assert_close(w, expected, atol=1e-12, rtol=0)


def test_support_reach_of_no_trajectory_is_an_empty_bool_tensor():
    empty = torch.zeros(0, dtype=torch.long)
    reach = support_reach(empty, empty, empty, 0)
    assert reach.dtype == torch.bool and reach.shape == (0,)


def test_metrics_of_one_row_and_of_an_empty_batch():
    # one single-turn trajectory with a tool error: w = 1, it is its own last turn (reached), it failed
    d = IAPO()(iapo_batch([0.7], [0], [0], [0], [0], [1])).diagnostics
    assert d == {"iapo/weight_max": 1.0, "iapo/weight_min": 1.0, "iapo/reach_frac": 1.0, "iapo/fail_frac": 1.0}
    batch = iapo_batch([], [], [], [], [], [], mask=torch.zeros(0, 2, dtype=torch.long))
    empty = torch.zeros(0, dtype=torch.long)
    batch.extras.update(traj=empty, step=empty, uses_support=empty, uses_failed=empty)
    batch.group = empty
    out = IAPO()(batch)
    assert out.advantages.shape == (0, 2)
    assert out.diagnostics == {"iapo/weight_max": 0.0, "iapo/weight_min": 0.0, "iapo/reach_frac": 0.0,
                               "iapo/fail_frac": 0.0}


def test_error_messages_name_the_estimator_and_the_bitmask_rule():
    batch = example_batch(1.2)
    batch.extras["tool_error"] = torch.tensor([0, 0, 0, 0.5, 0], dtype=torch.float64)
    with pytest.raises(ValueError, match=r"^advantage iapo: the step-row input 'tool_error' must hold only"):
        IAPO()(batch)
    batch = example_batch(1.2)
    batch.extras["uses_support"] = torch.tensor([0, 0b10, 0, 0b10, 0b10])
    with pytest.raises(ValueError, match=r"^advantage iapo: the step-row input 'uses_support' must be a non-negative "
                                         r"bitmask with bits only for earlier turns of the same trajectory "
                                         r"\(bit j < the row's step\)$"):
        IAPO()(batch)


def test_routing_weights_keep_a_bfloat16_advantages_dtype():
    adv = torch.full((5,), 1.2, dtype=torch.bfloat16)
    w = routing_weights(adv, torch.tensor(REACH), torch.tensor(ERROR).bool(), torch.tensor(FAILED) != 0,
                        torch.zeros(5, dtype=torch.long), 1, 1.0, 1.0, 0.5)
    assert w.dtype == torch.bfloat16
    close(w.float(), W_POS, atol=1e-2)  # bfloat16 has 8 bits of mantissa


def test_routing_weight_rho_is_taken_at_the_advantages_precision():
    # one trajectory of two positive rows, the first a failure: ω = [ρ, 1] (λ_s = 0), w = 2·ω/Σω = [0.6, 2]/1.3 in
    # float64 to 1e-12 (ρ = 0.3 rounded to float32 first would be off by 1e-8)
    adv = torch.tensor([1.2, 1.2], dtype=torch.float64)
    no = torch.tensor([False, False])
    w = routing_weights(adv, no, torch.tensor([True, False]), no, torch.tensor([0, 0]), 1, 0.0, 0.0, 0.3)
    assert w.dtype == torch.float64
    close(w, [0.6 / 1.3, 2 / 1.3], atol=1e-12)
