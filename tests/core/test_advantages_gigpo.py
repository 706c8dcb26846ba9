"""GiGPO on step rows: the spec's gigpo_basic example (every variant, rows shuffled), anchor-group edge cases,
input validation, its GRPO special cases, and the spec's ppo_loss_basic example on polo's loss pieces."""
import pytest
import torch

from polo.core.advantages import GRPO
from polo.core.advantages.gigpo import GiGPO
from polo.core.aggregation import StepCounts
from polo.core.losses import PPOClip
from polo.core.registry import ADVANTAGES, AGGREGATIONS, DIVERGENCES, ConfigError
from polo.train.config import load_recipe

from .helpers import build_batch, close

# gigpo_basic (multi-turn spec §3 d): one task, three trajectories; anchors s0..s4 as ids 0..4.
TRAJ = [0, 0, 0, 1, 1, 1, 1, 2, 2, 2]
STEP = [0, 1, 2, 0, 1, 2, 3, 0, 1, 2]
ANCHOR = [0, 1, 2, 0, 3, 1, 2, 0, 3, 4]
STEP_REWARD = [0, 0, 1, 0, 0, 0, 1, 0, 0, 0]
EPISODE = [1, 1, 1, 1, 1, 1, 1, 0, 0, 0]  # written on every step row of its trajectory

A_EP = {  # per row
    ("mean_norm", "steps"): [0.3] * 7 + [-0.7] * 3,
    ("mean_std_norm", "steps"): [0.6211] * 7 + [-1.4491] * 3,
    ("mean_norm", "trajectories"): [0.3333] * 7 + [-0.6667] * 3,
}
A_STEP_MEAN = [0.3159, 0, 0, 0.2707, 0.4512, 0, 0, -0.5866, -0.4512, 0]
# mean_std_norm: s0 = {0.9025, 0.8574, 0} (mean 0.5866, std_u 0.5085), s3 = {0.9025, 0} (0.4512, 0.6382)
A_STEP_STD = [0.6211, 0, 0, 0.5324, 0.7071, 0, 0, -1.1535, -0.7071, 0]
FINAL = {
    ("mean_norm", "steps"): [0.6159, 0.3, 0.3, 0.5707, 0.7512, 0.3, 0.3, -1.2866, -1.1512, -0.7],
    ("mean_std_norm", "steps"): [1.2422, 0.6211, 0.6211, 1.1535, 1.3282, 0.6211, 0.6211, -2.6027, -2.1562, -1.4491],
}


def step_batch(episode=EPISODE, traj=TRAJ, step=STEP, anchor=ANCHOR, step_reward=STEP_REWARD, group=None,
               mask=None, perm=None, dtype=torch.float64):
    N = len(traj)
    mask = torch.ones(N, 3, dtype=torch.long) if mask is None else torch.as_tensor(mask)
    batch = build_batch(episode, [0] * N if group is None else group, mask=mask)
    batch.rewards = batch.rewards.to(dtype)
    batch.reward_weights = batch.reward_weights.to(dtype)
    batch.extras.update(traj=torch.tensor(traj), step=torch.tensor(step), anchor=torch.tensor(anchor),
                        step_reward=torch.tensor(step_reward, dtype=dtype))
    return batch if perm is None else batch.select(perm)


def row_adv(est, batch):
    return est(batch).advantages[:, 0]


@pytest.mark.parametrize("mode, stats", list(A_EP))
def test_gigpo_basic_every_variant_in_any_row_order(mode, stats):
    perm = torch.randperm(10, generator=torch.Generator().manual_seed(7))
    for order in (torch.arange(10), perm):
        batch = step_batch(perm=order)
        episode_only = row_adv(GiGPO(mode=mode, stats_over=stats, step_advantage_w=0), batch)
        full = row_adv(GiGPO(mode=mode, stats_over=stats), batch)
        close(episode_only, torch.tensor(A_EP[mode, stats])[order])
        a_step = torch.tensor(A_STEP_MEAN if mode == "mean_norm" else A_STEP_STD)[order]
        close(full - episode_only, a_step)
        if (mode, stats) in FINAL:
            close(full, torch.tensor(FINAL[mode, stats])[order])
        close(row_adv(GiGPO(mode=mode, stats_over=stats, step_advantage_w=0.5), batch),
              episode_only + 0.5 * a_step)


def test_groups_are_independent_and_ids_arbitrary():
    # The example twice, as two tasks with arbitrary group ids. The copy reuses the anchor ids: anchor groups
    # are keyed inside their task, so equal ids in different tasks never meet.
    twice = step_batch(episode=EPISODE * 2, traj=TRAJ + [t + 10 for t in TRAJ], step=STEP * 2, anchor=ANCHOR * 2,
                       step_reward=STEP_REWARD * 2, group=[4] * 10 + [1] * 10)
    out = GiGPO()(twice)
    close(out.advantages[:, 0], FINAL["mean_norm", "steps"] * 2)
    assert out.diagnostics["gigpo/anchor_groups"] == 10
    close(torch.tensor(out.diagnostics["gigpo/anchor_singleton_frac"]), 0.2)  # s4 of each task
    close(torch.tensor(out.diagnostics["gigpo/anchor_group_size_mean"]), 2.0)


def test_broadcast_zero_on_masked_tokens_and_fully_masked_row():
    mask = [[1, 1, 1]] * 8 + [[1, 0, 0], [0, 0, 0]]
    adv = GiGPO()(step_batch(mask=mask)).advantages
    m = torch.tensor(mask)
    assert (adv[m == 0] == 0).all()
    close(adv[:8], torch.tensor(FINAL["mean_norm", "steps"][:8])[:, None].expand(8, 3))
    close(adv[8, 0], -1.1512)  # the masked row still counts in the statistics (as grpo's do)


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_singleton_anchor_groups_give_zero_step_advantage(mode):
    distinct = list(range(10))  # no state recurs: every anchor group is a singleton
    batch = step_batch(anchor=distinct)
    full, ep = row_adv(GiGPO(mode=mode), batch), row_adv(GiGPO(mode=mode, step_advantage_w=0), batch)
    assert torch.equal(full, ep)
    assert GiGPO(mode=mode)(batch).diagnostics["gigpo/anchor_singleton_frac"] == 1.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_all_equal_returns_and_rewards_give_exactly_zero(mode, dtype):
    # Every trajectory succeeds at its 3rd turn, all through the same states: equal episode rewards (A^E = 0)
    # and equal returns in every anchor group (A^S = 0, even divided by std + eps in float32).
    batch = step_batch(episode=[10.0] * 9, traj=[0, 0, 0, 1, 1, 1, 2, 2, 2], step=[0, 1, 2] * 3,
                       anchor=[0, 1, 2] * 3, step_reward=[0.1, 0.1, 1.0] * 3, dtype=dtype)
    adv = GiGPO(mode=mode)(batch).advantages
    assert adv.dtype == dtype and (adv == 0).all()


def test_single_step_rows_and_single_trajectory_group():
    # A task with one one-turn trajectory: episode singleton (mean 0, std 1 → A^E = R), anchor singleton (0).
    batch = step_batch(episode=[0.4], traj=[3], step=[0], anchor=[8], step_reward=[0.4])
    for mode in ("mean_norm", "mean_std_norm"):
        for stats in ("steps", "trajectories"):
            close(row_adv(GiGPO(mode=mode, stats_over=stats), batch), [0.4])


def test_trajectories_stats_use_one_value_per_trajectory():
    # τ1 has 3 rows with R = 1, τ2 one row with R = 0: steps-weighted mean 0.75, per-trajectory mean 0.5.
    batch = step_batch(episode=[1, 1, 1, 0], traj=[0, 0, 0, 1], step=[0, 1, 2, 0], anchor=[0, 1, 2, 3],
                       step_reward=[0, 0, 1, 0])
    close(row_adv(GiGPO(step_advantage_w=0), batch), [0.25, 0.25, 0.25, -0.75])
    close(row_adv(GiGPO(step_advantage_w=0, stats_over="trajectories"), batch), [0.5, 0.5, 0.5, -0.5])


def test_episode_reward_is_the_weighted_total_of_the_reward_components():
    batch = step_batch()
    batch.rewards = torch.stack([batch.rewards[:, 0] * 2, torch.full((10,), 5.0, dtype=torch.float64)], 1)
    batch.reward_weights = torch.tensor([0.5, 0.0], dtype=torch.float64)
    close(row_adv(GiGPO(), batch), FINAL["mean_norm", "steps"])


def test_special_cases_equal_grpo():
    batch = step_batch()
    # Plain grpo on step rows = GiGPO's episode term with steps-weighted statistics (verl-agent's baseline).
    close(row_adv(GRPO(), batch), row_adv(GiGPO(mode="mean_std_norm", step_advantage_w=0), batch))
    # Trajectory-level GRPO (one value per trajectory), evaluated on one row per trajectory, broadcast back.
    per_traj = row_adv(GRPO(), build_batch([1.0, 1.0, 0.0]))
    close(row_adv(GiGPO(mode="mean_std_norm", stats_over="trajectories", step_advantage_w=0), batch),
          per_traj[torch.tensor(TRAJ)])


def test_needs_depend_on_settings():
    assert GiGPO().needs() == {"traj", "step", "anchor", "step_reward"} == set(GiGPO.requires)
    assert GiGPO(step_advantage_w=0).needs() == set()
    assert GiGPO(step_advantage_w=0, stats_over="trajectories").needs() == {"traj"}
    batch = build_batch([1.0, 0.0])  # no step inputs at all: fine when none is needed
    close(row_adv(GiGPO(step_advantage_w=0), batch), [0.5, -0.5])


def test_deterministic():
    batch = step_batch(perm=torch.tensor([9, 3, 0, 5, 1, 8, 2, 7, 4, 6]))
    a, b = GiGPO(mode="mean_std_norm")(batch), GiGPO(mode="mean_std_norm")(batch)
    assert torch.equal(a.advantages, b.advantages) and a.diagnostics == b.diagnostics


@pytest.mark.parametrize("name", ["traj", "step", "anchor", "step_reward"])
def test_missing_input_is_named(name):
    batch = step_batch()
    del batch.extras[name]
    with pytest.raises(ValueError, match=rf"gigpo needs the step-row input '{name}' \[10\].*has none"):
        GiGPO()(batch)


@pytest.mark.parametrize("name, value, match", [
    ("traj", torch.zeros(10, 2, dtype=torch.long), r"shape \(10, 2\)"),
    ("step", torch.arange(9), r"shape \(9,\)"),
    ("anchor", torch.zeros(10), "dtype torch.float32"),
    ("step_reward", torch.tensor([float("nan")] + [0.0] * 9), "non-finite"),
    ("step_reward", torch.tensor([float("inf")] + [0.0] * 9), "non-finite"),
])
def test_malformed_input_is_refused(name, value, match):
    batch = step_batch()
    batch.extras[name] = value
    with pytest.raises(ValueError, match=match):
        GiGPO()(batch)


def test_non_finite_episode_reward_and_inconsistent_steps_are_refused():
    batch = step_batch()
    batch.rewards[0, 0] = float("nan")
    with pytest.raises(ValueError, match="episode rewards"):
        GiGPO()(batch)
    with pytest.raises(ValueError, match="exactly once"):
        GiGPO()(step_batch(step=[0, 1, 1, 0, 1, 2, 3, 0, 1, 2]))
    with pytest.raises(ValueError, match="spans several groups"):
        GiGPO()(step_batch(group=[0, 0, 1, 1, 1, 1, 1, 1, 1, 1]))


def test_config_fields_are_validated():
    est = ADVANTAGES.build({"name": "gigpo", "gamma": 0.9, "mode": "mean_std_norm", "stats_over": "trajectories"})
    assert isinstance(est, GiGPO) and est.eps == 1e-6 and est.step_advantage_w == 1.0
    for bad in ({"gamma": 1.5}, {"mode": "std"}, {"stats_over": "episodes"}, {"eps": 0}, {"step_advantage_w": -1},
                {"enable_similarity": True}):
        with pytest.raises(ConfigError, match="advantage"):
            ADVANTAGES.build({"name": "gigpo", **bad})


def test_recipe_validation_names_the_step_inputs_no_engine_provides():
    with pytest.raises(ConfigError, match=r"advantage gigpo need\(s\) input\(s\) \['anchor', 'step', 'step_reward', "
                                          r"'traj'\] that neither engine 'single_turn'"):
        load_recipe("grpo", ["advantage=gigpo"])
    with pytest.raises(ConfigError, match=r"input\(s\) \['traj'\]"):
        load_recipe("grpo", ["advantage={name: gigpo, step_advantage_w: 0, stats_over: trajectories}"])


# ---------------------------------------------------------------- ppo_loss_basic (spec §2.3) on polo's pieces


def test_ppo_loss_basic_with_polo_ppo_clip_aggregations_and_k3():
    mask = [[1, 1, 1, 0], [1, 1, 0, 0]]
    old = torch.tensor([[-1.0, -0.5, -2.0, 0], [-0.3, -1.2, 0, 0]], dtype=torch.float64)
    new = torch.tensor([[-0.8, -0.7, -1.0, 0], [-0.35, -0.4, 0, 0]], dtype=torch.float64)
    batch = build_batch([0.0, 0.0], mask=mask, old_logp=old)
    batch.advantages = torch.tensor([[1, 1, 1, 0], [-2, -2, 0, 0]], dtype=torch.float64)
    u = PPOClip(clip_low=0.2, clip_high=0.2, dual_clip=3.0)(new, batch).token_loss
    m = batch.mask
    close(u * m, [[-1.2, -0.8187, -1.2, 0], [1.9025, 4.4511, 0, 0]])
    counts = StepCounts.from_mask(m, max_length=4)
    for name, expected in (("token_mean", 0.6270), ("seq_mean_token_mean", 1.0519), ("seq_mean_token_sum", 1.5674)):
        close(AGGREGATIONS.build(name)(u, m, counts), expected)
    close(DIVERGENCES.build("k3")(torch.tensor(-0.8), torch.tensor(-1.0)), 0.0187)


# ---- mutation-testing kills
def test_eps_reaches_both_levels_of_mean_std_norm():
    # eps = 1. Episode: rewards 1 ×7, 0 ×3: mean 0.7, std_u = √(2.1/9) = 0.483046 → A^E_0 = 0.3/1.483046 = 0.202287.
    # Step, anchor s0 = rows 0, 3, 7 with returns 0.95², 0.95³, 0: mean 0.586625, std_u 0.508533
    # → A^S_0 = 0.315875/1.508533 = 0.209392; A_0 = 0.202287 + 0.209392
    adv = row_adv(GiGPO(mode="mean_std_norm", eps=1.0), step_batch())
    close(adv[0], 0.411679)


def test_step_rewards_are_read_in_the_episode_rewards_dtype():
    batch = step_batch(dtype=torch.float32)
    batch.extras["step_reward"] = batch.extras["step_reward"].double()
    adv = GiGPO()(batch).advantages
    assert adv.dtype == torch.float32
    close(adv[:, 0], FINAL[("mean_norm", "steps")])


def test_step_metrics_name_and_value():
    metrics = GiGPO()(step_batch()).diagnostics
    # mean |A^S| over the 10 rows: (0.3159 + 0.2707 + 0.4512 + 0.5866 + 0.4512)/10
    assert metrics["gigpo/step_adv_abs_mean"] == pytest.approx(0.20756, abs=1e-4)
    assert metrics["gigpo/anchor_group_size_mean"] == pytest.approx(2.0)  # 10 rows over 5 anchors s0..s4
    assert metrics["gigpo/anchor_singleton_frac"] == pytest.approx(0.2)  # s4 alone


def test_a_trajectory_across_two_groups_names_gigpo():
    with pytest.raises(ValueError, match="^advantage gigpo: a trajectory id spans several groups"):
        GiGPO()(step_batch(group=[0, 0, 1, 1, 1, 1, 1, 2, 2, 2]))


def test_an_empty_batch_reports_zero_step_metrics():
    batch = build_batch(torch.zeros(0), torch.zeros(0, dtype=torch.long), mask=torch.ones(0, 3, dtype=torch.long))
    none = torch.zeros(0, dtype=torch.long)
    batch.extras.update(traj=none, step=none, anchor=none, step_reward=torch.zeros(0, dtype=torch.float64))
    result = GiGPO()(batch)
    assert result.advantages.shape == (0, 3)
    assert result.diagnostics == {"gigpo/anchor_groups": 0.0, "gigpo/anchor_group_size_mean": 0.0,
                                  "gigpo/anchor_singleton_frac": 0.0, "gigpo/step_adv_abs_mean": 0.0}
