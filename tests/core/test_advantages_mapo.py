"""MAPO (dialogue) on step rows: the spec's mapo_mixed example (both levels and the mix; rows shuffled), the
outcome term, small turn pools, edge cases, the two judge sources (the judge role's ``turn_judge``, failed
judgments included, and the environment's ``judge``) and input validation."""
import pytest
import torch

from polo.core.advantages.mapo import MAPO
from polo.core.registry import ADVANTAGES, ConfigError

from .helpers import build_batch, close

# mapo_mixed (multi-turn spec §8 d): judge scores per dialogue, γ = 0.9, λ = 0.5.
JUDGE = [[0.6, 0.8, 0.9], [0.4, 0.3, 0.5], [0.7, 0.5]]
RETURNS = [2.049, 1.61, 0.9, 1.075, 0.75, 0.5, 1.15, 0.5]
A_TURN = [1.1519, 1.1278, 0.7071, -0.6452, -0.3492, -0.7071, -0.5068, -0.7786]
A_BATCH = [1.8206, 1.0069, -0.3091, 0.0153, -0.5871, -1.0505, 0.1543, -1.0505]
MIXED = [1.4863, 1.0674, 0.1990, -0.3149, -0.4682, -0.8788, -0.1762, -0.9145]


def mapo_batch(judge=JUDGE, outcome=None, group=None, mask=None, perm=None, dtype=torch.float64, name="turn_judge"):
    traj = [i for i, js in enumerate(judge) for _ in js]
    step = [k for js in judge for k in range(len(js))]
    outcome = [0.0] * len(judge) if outcome is None else outcome
    groups = [0] * len(judge) if group is None else group
    mask = torch.ones(len(traj), 2, dtype=torch.long) if mask is None else torch.as_tensor(mask)
    batch = build_batch([outcome[i] for i in traj], [groups[i] for i in traj], mask=mask)
    batch.rewards = batch.rewards.to(dtype)
    batch.reward_weights = batch.reward_weights.to(dtype)
    batch.extras.update(traj=torch.tensor(traj), step=torch.tensor(step),
                        **{name: torch.tensor([x for js in judge for x in js], dtype=dtype)})
    return batch if perm is None else batch.select(perm)


def row_adv(est, batch):
    return est(batch).advantages[:, 0]


def test_mapo_mixed_levels_and_mix_in_any_row_order():
    perm = torch.randperm(8, generator=torch.Generator().manual_seed(11))
    for order in (torch.arange(8), perm):
        batch = mapo_batch(perm=order)
        close(row_adv(MAPO(), batch), torch.tensor(MIXED)[order])
        close(row_adv(MAPO(lam=1.0), batch), torch.tensor(A_TURN)[order])
        close(row_adv(MAPO(lam=0.0), batch), torch.tensor(A_BATCH)[order])
        close(row_adv(MAPO(lam=0.0, gamma=0.9), batch) * 0.5395 + 1.0668, torch.tensor(RETURNS)[order], atol=2e-4)
    assert MAPO()(mapo_batch()).diagnostics["mapo/turn_pool_singleton_frac"] == 0.0


def returns_of(judge, gamma):
    out = []
    for js in judge:
        acc, g = 0.0, []
        for s in reversed(js):
            acc = s + gamma * acc
            g.append(acc)
        out += g[::-1]
    return torch.tensor(out, dtype=torch.float64)


def test_outcome_weight_adds_the_outcome_to_the_last_turn():
    # Same as adding outcome_weight·R_i to each dialogue's last judge score. The shifted scores leave [0, 1],
    # so the reference runs on half of them: z-scores do not change with the scale (up to eps).
    outcome = [1.0, 0.0, 0.5]
    shifted = [js[:-1] + [js[-1] + 0.4 * r] for js, r in zip(JUDGE, outcome)]
    expected = row_adv(MAPO(), mapo_batch(judge=[[x / 2 for x in js] for js in shifted]))
    close(row_adv(MAPO(outcome_weight=0.4), mapo_batch(outcome=outcome)), expected)
    # The returns themselves: batch-level z-score of returns_of(shifted).
    g = returns_of(shifted, 0.9)
    close(row_adv(MAPO(outcome_weight=0.4, lam=0.0), mapo_batch(outcome=outcome)), (g - g.mean()) / (g.std() + 1e-6))
    # Off by default: the outcome does not matter.
    close(row_adv(MAPO(), mapo_batch(outcome=outcome)), MIXED)


def test_small_turn_pools_give_zero_turn_advantage():
    # D3 now has 4 turns: turn index 3 has one return → A^turn 0 there; one of four (group, turn) pools.
    judge = JUDGE[:2] + [[0.7, 0.5, 0.2, 0.9]]
    out = MAPO(lam=1.0)(mapo_batch(judge=judge))
    assert out.advantages[-1, 0] == 0
    assert out.diagnostics["mapo/turn_pool_singleton_frac"] == 0.25
    # Two groups never share a turn pool: each dialogue alone in its group → every A^turn is 0.
    alone = MAPO(lam=1.0)(mapo_batch(group=[0, 1, 2]))
    assert (alone.advantages == 0).all() and alone.diagnostics["mapo/turn_pool_singleton_frac"] == 1.0


def test_single_dialogue_and_single_row():
    # One dialogue: no turn peers (A^turn = 0); the batch level compares its own returns.
    g = returns_of([[0.2, 0.6, 0.9]], 0.9)
    close(row_adv(MAPO(), mapo_batch(judge=[[0.2, 0.6, 0.9]])), 0.5 * (g - g.mean()) / (g.std() + 1e-6))
    # A batch of one return: nothing to compare → 0.
    assert (MAPO()(mapo_batch(judge=[[0.8]])).advantages == 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_all_equal_dialogues_give_exactly_zero(dtype):
    batch = mapo_batch(judge=[[0.3, 0.7]] * 3, dtype=dtype)
    adv = MAPO(lam=1.0)(batch).advantages
    assert adv.dtype == dtype and (adv == 0).all()
    batch = mapo_batch(judge=[[0.25, 0.5], [0.5]], dtype=dtype)  # every return 0.5: the batch level is 0 too
    assert (MAPO(gamma=0.5)(batch).advantages == 0).all()


def test_masked_tokens_are_exactly_zero():
    mask = [[1, 1]] * 6 + [[1, 0], [0, 0]]
    adv = MAPO()(mapo_batch(mask=mask)).advantages
    assert (adv[torch.tensor(mask) == 0] == 0).all()
    close(adv[:7, 0], MIXED[:7])
    close(adv[:6, 1], MIXED[:6])


def test_deterministic():
    batch = mapo_batch(perm=torch.tensor([3, 7, 0, 5, 1, 6, 2, 4]))
    a, b = MAPO()(batch), MAPO()(batch)
    assert torch.equal(a.advantages, b.advantages) and a.diagnostics == b.diagnostics


def test_the_oracle_source_reads_the_environments_judge_and_the_sources_differ():
    oracle = mapo_batch(name="judge")
    close(row_adv(MAPO(judge="oracle"), oracle), MIXED)
    assert MAPO(judge="oracle").needs() == {"traj", "step", "judge"} and MAPO().needs() == {"traj", "step",
                                                                                              "turn_judge"}
    # one batch carrying both: the role's scores (reversed within each dialogue) give other advantages
    both = mapo_batch(judge=[js[::-1] for js in JUDGE])
    both.extras["judge"] = oracle.extras["judge"]
    assert not torch.allclose(row_adv(MAPO(), both), row_adv(MAPO(judge="oracle"), both))
    close(row_adv(MAPO(judge="oracle"), both), MIXED)


def test_a_failed_judgment_counts_as_the_mean_judged_turn():
    judge = [js[:] for js in JUDGE]
    judge[1][1] = float("nan")
    out = MAPO()(mapo_batch(judge=judge))
    judged = [x for js in JUDGE for x in js if x != 0.3]
    filled = [js[:] for js in JUDGE]
    filled[1][1] = sum(judged) / len(judged)
    close(out.advantages[:, 0], row_adv(MAPO(), mapo_batch(judge=filled)))
    assert out.diagnostics["mapo/judge_missing_frac"] == 1 / 8
    assert out.diagnostics["mapo/judge_mean"] == pytest.approx(sum(judged) / len(judged))
    assert MAPO()(mapo_batch(judge=[[float("nan")] * 2] * 2)).diagnostics["mapo/judge_mean"] == 0.0


@pytest.mark.parametrize("source, name", [("role", "traj"), ("role", "step"), ("role", "turn_judge"),
                                          ("oracle", "judge")])
def test_missing_input_is_named(source, name):
    batch = mapo_batch(name="judge" if source == "oracle" else "turn_judge")
    del batch.extras[name]
    with pytest.raises(ValueError, match=rf"mapo needs the step-row input '{name}' \[8\].*has none"):
        MAPO(judge=source)(batch)


@pytest.mark.parametrize("source, value, match", [
    ("oracle", torch.tensor([float("nan")] + [0.5] * 7), "non-finite"),
    ("role", torch.tensor([float("inf")] + [0.5] * 7), "infinite"),
    ("oracle", torch.tensor([1.5] + [0.5] * 7), r"'judge' must hold scores in \[0, 1\]"),
    ("role", torch.tensor([-0.1] + [0.5] * 7), r"'turn_judge' must hold scores in \[0, 1\]"),
])
def test_malformed_judge_is_refused(source, value, match):
    name = "judge" if source == "oracle" else "turn_judge"
    batch = mapo_batch(name=name)
    batch.extras[name] = value.double()
    with pytest.raises(ValueError, match=match):
        MAPO(judge=source)(batch)


def test_non_finite_reward_and_inconsistent_steps_are_refused():
    batch = mapo_batch()
    batch.rewards[0, 0] = float("nan")
    with pytest.raises(ValueError, match="mapo: the episode rewards"):
        MAPO(outcome_weight=1.0)(batch)
    batch = mapo_batch()
    batch.extras["traj"] = torch.tensor([0, 0, 0, 1, 1, 1, 1, 2])
    with pytest.raises(ValueError, match="mapo: each trajectory's step rows"):
        MAPO()(batch)


def test_registry_and_config_validation():
    est = ADVANTAGES.build({"name": "mapo"})
    assert isinstance(est, MAPO) and est.gamma == 0.9 and est.lam == 0.5 and est.outcome_weight == 0.0
    assert est.judge == "role" and MAPO.requires == {"traj", "step", "turn_judge"}
    assert "2603.06194" in MAPO.paper and "2509.18849" in MAPO.__doc__
    for bad in ({"lam": 1.5}, {"gamma": -0.1}, {"outcome_weight": -1}, {"eps": 0}, {"judge": "environment"}):
        with pytest.raises(ConfigError, match="advantage"):
            ADVANTAGES.build({"name": "mapo", **bad})


# ---- mutation-testing kills


def test_eps_is_added_to_both_stds():
    # two one-turn dialogues in one group, scores 0.2 and 0.8: returns 0.2, 0.8 (mean 0.5, std_u 0.42426) in
    # both the turn pool and the batch; eps = 0.5: A = ±0.3/(0.42426 + 0.5) = ±0.32458 at either level
    batch = mapo_batch(judge=[[0.2], [0.8]])
    for lam in (0.0, 1.0):
        close(row_adv(MAPO(eps=0.5, lam=lam), batch), [-0.3 / (0.18**0.5 + 0.5), 0.3 / (0.18**0.5 + 0.5)])


def test_scores_of_exactly_zero_and_one_are_accepted():
    # dialogues [1, 0] and [0, 1], γ = 0.9: returns 1.0, 0.0 (turn 0 and 1 of D1), 0.9, 1.0 (D2)
    out = MAPO(lam=0.0)(mapo_batch(judge=[[1.0, 0.0], [0.0, 1.0]]))
    g = torch.tensor([1.0, 0.0, 0.9, 1.0], dtype=torch.float64)  # mean 0.725, std_u √(0.7075/3) = 0.48563
    close(out.advantages[:, 0], (g - 0.725) / ((0.7075 / 3) ** 0.5 + 1e-6))
    assert out.diagnostics["mapo/judge_std"] == pytest.approx((1 / 3) ** 0.5)  # std_u of [1, 0, 0, 1]


def test_integer_oracle_scores_are_read_as_floats():
    # an environment may write 0/1 scores as integers: same advantages as the float scores
    ints = mapo_batch(judge=[[1.0, 0.0], [0.0, 1.0]], name="judge")
    ints.extras["judge"] = torch.tensor([1, 0, 0, 1])
    expected = row_adv(MAPO(judge="oracle"), mapo_batch(judge=[[1.0, 0.0], [0.0, 1.0]], name="judge"))
    close(row_adv(MAPO(judge="oracle"), ints), expected)


def test_no_judged_turn_fills_zero_and_the_judge_metrics():
    # every judgment failed: the scores are filled with 0 → every return 0 → every advantage 0
    out = MAPO()(mapo_batch(judge=[[float("nan")] * 2] * 2))
    assert (out.advantages == 0).all()
    assert out.diagnostics["mapo/judge_std"] == 0.0 and out.diagnostics["mapo/judge_missing_frac"] == 1.0
    # the spec example: std_u of the 8 judge scores (mean 0.5875) = 0.20310
    assert MAPO()(mapo_batch()).diagnostics["mapo/judge_std"] == pytest.approx(0.20310, abs=1e-5)
    # one judged turn: no spread (0, not NaN); two: 0.2, 0.8 → std_u 0.42426
    assert MAPO()(mapo_batch(judge=[[0.8]])).diagnostics["mapo/judge_std"] == 0.0
    assert MAPO()(mapo_batch(judge=[[0.2], [0.8]])).diagnostics["mapo/judge_std"] == pytest.approx(0.18**0.5)


def test_an_empty_batch_reports_zero_metrics():
    batch = mapo_batch(judge=[])
    batch.group = torch.zeros(0, dtype=torch.long)
    batch.extras.update(traj=torch.zeros(0, dtype=torch.long), step=torch.zeros(0, dtype=torch.long))
    out = MAPO()(batch)
    assert out.advantages.shape == (0, 2)
    assert out.diagnostics == {"mapo/turn_pool_singleton_frac": 0.0, "mapo/judge_mean": 0.0, "mapo/judge_std": 0.0,
                               "mapo/judge_missing_frac": 0.0}
