"""IGPO on step rows: the spec's igpo_joint example (joint, separate, γ = 0.9; rows shuffled), the probe
arithmetic, the options against a plain-Python reference, edge cases and input validation."""
import math

import pytest
import torch

from polo.core.advantages.igpo import IGPO, probe_logp, probe_probability
from polo.core.registry import ADVANTAGES, ConfigError

from .helpers import build_batch, close

# igpo_joint (multi-turn spec §6 d): belief probabilities p_0..p_{T−1} per trajectory (row k holds ℓ_k = log p_k)
# and the F1 outcome of each trajectory.
P = [[0.10, 0.30, 0.70], [0.10, 0.05], [0.10, 0.20, 0.25, 0.15]]
F1 = [1.0, 0.0, 0.5]
JOINT = [2.7205, 2.8212, 2.3174, -1.5618, -0.7053, -1.1587, -0.7557, -0.2015, 0.8061]
SEPARATE = [3.6368, 3.0338, 1.2247, -2.1293, -1.2247, -1.5075, -1.5075, -1.2060, 0.0]
JOINT_G09 = [2.2298, 2.5895, 2.3174, -1.4912, -0.7053, -1.1303, -0.8081, -0.2821, 0.8061]


def igpo_batch(p=P, outcome=F1, group=None, mask=None, perm=None, dtype=torch.float64, logp=None):
    """Step rows of the trajectories in ``p`` (lists of probe probabilities), one group unless ``group`` gives
    one id per trajectory; ``logp`` (lists of ℓ) replaces ``p``."""
    logp = [[math.log(x) for x in ps] for ps in p] if logp is None else logp
    traj = [i for i, ls in enumerate(logp) for _ in ls]
    step = [k for ls in logp for k in range(len(ls))]
    groups = [0] * len(logp) if group is None else group
    N = len(traj)
    mask = torch.ones(N, 2, dtype=torch.long) if mask is None else torch.as_tensor(mask)
    batch = build_batch([outcome[i] for i in traj], [groups[i] for i in traj], mask=mask)
    batch.rewards = batch.rewards.to(dtype)
    batch.reward_weights = batch.reward_weights.to(dtype)
    batch.extras.update(traj=torch.tensor(traj), step=torch.tensor(step),
                        gold_logp=torch.tensor([x for ls in logp for x in ls], dtype=dtype))
    return batch if perm is None else batch.select(perm)


def reference(logp, outcome, gamma=1.0, kind="prob_diff", mode="joint", by_std=True, w_f1=1.0, w_ig=1.0):
    """Plain-Python IGPO for one group: per-trajectory lists of turn advantages, flattened."""
    rewards, final = [], []
    for ls, f1 in zip(logp, outcome):
        for k in range(len(ls)):
            last = k == len(ls) - 1
            if last:
                rewards.append(w_f1 * f1)
            else:
                ig = math.exp(ls[k + 1]) - math.exp(ls[k]) if kind == "prob_diff" else ls[k + 1] - ls[k]
                rewards.append(w_ig * ig)
            final.append(last)
    pools = [[True, False]] if mode == "joint" else [[True], [False]]
    normed = [0.0] * len(rewards)
    for pool in pools:
        idx = [n for n, f in enumerate(final) if f in pool]
        vals = [rewards[n] for n in idx]
        mu = sum(vals) / len(vals)
        sigma = math.sqrt(sum((v - mu) ** 2 for v in vals) / len(vals) + 1e-8) if len(vals) > 1 else 1.0
        for n in idx:
            normed[n] = (rewards[n] - mu) / (sigma + 1e-6) if by_std else rewards[n] - mu
    out, start = [], 0
    for ls in logp:
        seg = normed[start:start + len(ls)]
        acc, adv = 0.0, []
        for r in reversed(seg):
            acc = r + gamma * acc
            adv.append(acc)
        out += adv[::-1]
        start += len(ls)
    return out


def row_adv(est, batch):
    return est(batch).advantages[:, 0]


def test_igpo_joint_separate_and_discounted_in_any_row_order():
    perm = torch.randperm(9, generator=torch.Generator().manual_seed(3))
    for order in (torch.arange(9), perm):
        batch = igpo_batch(perm=order)
        close(row_adv(IGPO(), batch), torch.tensor(JOINT)[order])
        close(row_adv(IGPO(norm_mode="separate"), batch), torch.tensor(SEPARATE)[order])
        close(row_adv(IGPO(gamma=0.9), batch), torch.tensor(JOINT_G09)[order])


def test_igpo_joint_turn_rewards_statistics_and_diagnostics():
    # Undo the return-to-go with γ = 0: the normalized turn rewards, μ = 0.2333, σ = 0.3308.
    normed = row_adv(IGPO(gamma=0.0), igpo_batch())
    turn_r = torch.tensor([0.2, 0.4, 1.0, -0.05, 0.0, 0.1, 0.05, -0.1, 0.5], dtype=torch.float64)
    close(normed, (turn_r - 0.2333) / 0.3308, atol=5e-4)  # μ, σ given to 4 decimals
    close(normed, [-0.1008, 0.5038, 2.3174, -0.8564, -0.7053, -0.4030, -0.5542, -1.0076, 0.8061])
    close(row_adv(IGPO(gamma=0.0, norm_adv_by_std=False), igpo_batch()), turn_r - 0.7 / 3)
    diag = IGPO()(igpo_batch()).diagnostics
    close(torch.tensor(diag["igpo/ig_mean"]), 0.1)  # IG 0.2, 0.4, −0.05, 0.1, 0.05, −0.1
    close(torch.tensor(diag["igpo/ig_abs_mean"]), 0.15)


def test_probe_arithmetic():
    token_logps = torch.tensor([0.5, 0.2, 0.8], dtype=torch.float64).log()
    close(probe_probability(token_logps), 0.4309)
    close(probe_logp(token_logps), math.log(0.4309), atol=1e-3)
    # Masked gold positions (a padded batch of two probes); a probe without gold tokens gives ℓ = 0.
    padded = torch.tensor([[0.5, 0.2, 0.8, 0.01], [0.9, 0.01, 0.01, 0.01], [1.0, 1.0, 1.0, 1.0]]).log()
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    close(probe_probability(padded, mask), [0.4309, 0.9, 1.0])


@pytest.mark.parametrize("options", [
    {"info_gain_type": "log_prob_diff"},
    {"info_gain_type": "log_prob_diff", "norm_mode": "separate", "gamma": 0.8},
    {"norm_adv_by_std": False, "gamma": 0.95},
    {"norm_adv_by_std": False, "norm_mode": "separate"},
    {"f1_weight": 0.5, "ig_weight": 1.0},
    {"f1_weight": 1.0, "ig_weight": 0.5, "norm_mode": "separate"},
])
def test_options_match_a_plain_reference(options):
    logp = [[math.log(x) for x in ps] for ps in P]
    names = {"info_gain_type": "kind", "norm_mode": "mode", "norm_adv_by_std": "by_std", "f1_weight": "w_f1",
             "ig_weight": "w_ig", "gamma": "gamma"}
    expected = reference(logp, F1, **{names[k]: v for k, v in options.items()})
    close(row_adv(IGPO(**options), igpo_batch()), expected)


def test_groups_are_independent():
    p2 = [[0.5, 0.6], [0.4]]  # a second task: a two-turn and a one-turn trajectory
    batch = igpo_batch(p=P + p2, outcome=F1 + [1.0, 0.0], group=[7, 7, 7, 2, 2])
    logp2 = [[math.log(x) for x in ps] for ps in p2]
    close(row_adv(IGPO(), batch), JOINT + reference(logp2, [1.0, 0.0]))


def test_single_trajectory_cases():
    # A one-turn trajectory alone: its outcome is a pool of one (σ = 1, μ = itself) → 0.
    close(row_adv(IGPO(), igpo_batch(p=[[0.3]], outcome=[0.8])), [0.0])
    # One multi-turn trajectory: its turn rewards form the pool. With one turn per trajectory, only the outcome.
    logp = [[math.log(0.1), math.log(0.4), math.log(0.5)]]
    close(row_adv(IGPO(), igpo_batch(logp=logp, outcome=[1.0])), reference(logp, [1.0]))
    one_turn = igpo_batch(p=[[0.2], [0.9]], outcome=[1.0, 0.0])  # gold_logp unused: no IG
    close(row_adv(IGPO(), one_turn), [1.0, -1.0])  # (±0.5)/population std 0.5


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode", ["joint", "separate"])
def test_all_equal_turn_rewards_give_exactly_zero(mode, dtype):
    # log_prob_diff with ℓ rising by 1 per turn and outcome 1: every turn reward is 1.
    logp = [[-3.0, -2.0, -1.0], [-2.0, -1.0], [-5.0]]
    batch = igpo_batch(logp=logp, outcome=[1.0, 1.0, 1.0], dtype=dtype)
    adv = IGPO(info_gain_type="log_prob_diff", norm_mode=mode, gamma=0.9)(batch).advantages
    assert adv.dtype == dtype and (adv == 0).all()


def test_masked_tokens_are_exactly_zero():
    mask = [[1, 1]] * 7 + [[1, 0], [0, 0]]
    adv = IGPO()(igpo_batch(mask=mask)).advantages
    m = torch.tensor(mask)
    assert (adv[m == 0] == 0).all()
    close(adv[:, 0][:8], JOINT[:8])  # a masked turn still counts in its group's pool and returns
    close(adv[:7, 1], JOINT[:7])


def test_overflowing_information_gain_counts_as_zero():
    # exp(800) overflows float64: that IG is set to 0, as is every non-finite IG.
    batch = igpo_batch(logp=[[0.0, 800.0], [0.0, -1.0]], outcome=[1.0, 0.0])
    expected = reference([[0.0, 0.0], [0.0, -1.0]], [1.0, 0.0])  # ℓ_1 = 0 gives IG 0 too
    close(row_adv(IGPO(), batch), expected)


def test_deterministic():
    batch = igpo_batch(perm=torch.tensor([8, 2, 5, 0, 7, 1, 4, 6, 3]))
    a, b = IGPO(norm_mode="separate")(batch), IGPO(norm_mode="separate")(batch)
    assert torch.equal(a.advantages, b.advantages) and a.diagnostics == b.diagnostics


@pytest.mark.parametrize("name", ["traj", "step", "gold_logp"])
def test_missing_input_is_named(name):
    batch = igpo_batch()
    del batch.extras[name]
    with pytest.raises(ValueError, match=rf"igpo needs the step-row input '{name}' \[9\].*has none"):
        IGPO()(batch)


@pytest.mark.parametrize("value, match", [
    (torch.tensor([float("nan")] + [0.0] * 8), "non-finite"),
    (torch.tensor([-float("inf")] + [0.0] * 8), "non-finite"),
    (torch.zeros(8), r"shape \(8,\)"),
])
def test_malformed_gold_logp_is_refused(value, match):
    batch = igpo_batch()
    batch.extras["gold_logp"] = value
    with pytest.raises(ValueError, match=match):
        IGPO()(batch)


def test_non_finite_reward_and_inconsistent_steps_are_refused():
    batch = igpo_batch()
    batch.rewards[0, 0] = float("nan")
    with pytest.raises(ValueError, match="igpo: the episode rewards"):
        IGPO()(batch)
    batch = igpo_batch()
    batch.extras["step"] = torch.tensor([0, 1, 1, 0, 1, 0, 1, 2, 3])
    with pytest.raises(ValueError, match="igpo: each trajectory's step rows"):
        IGPO()(batch)
    batch = igpo_batch()
    batch.group = torch.tensor([0, 0, 1, 1, 1, 1, 1, 1, 1])
    with pytest.raises(ValueError, match="igpo: a trajectory id spans several groups"):
        IGPO()(batch)


def test_registry_and_config_validation():
    est = ADVANTAGES.build({"name": "igpo", "gamma": 0.9, "norm_mode": "separate"})
    assert isinstance(est, IGPO) and est.info_gain_type == "prob_diff" and est.norm_adv_by_std
    assert IGPO.requires == {"traj", "step", "gold_logp"} == IGPO().needs()
    for bad in ({"gamma": 1.5}, {"norm_mode": "pooled"}, {"info_gain_type": "kl"}, {"eps": 0},
                {"f1_weight": -1}, {"decay": 0.1}):
        with pytest.raises(ConfigError, match="advantage"):
            ADVANTAGES.build({"name": "igpo", **bad})


# ---- mutation-testing kills


def test_probe_logp_averages_the_last_axis_of_any_shape():
    # no mask: the mean of each row, [[-1, -3], [-4, -6]] → [-2, -5]
    close(probe_logp(torch.tensor([[-1.0, -3.0], [-4.0, -6.0]], dtype=torch.float64)), [-2.0, -5.0])
    # [2, 3, 4] with a mask keeping the first two tokens: (-1 - 2)/2 = -1.5 everywhere, shape [2, 3]
    logps = torch.tensor([-1.0, -2.0, -7.0, -9.0], dtype=torch.float64).expand(2, 3, 4)
    mask = torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=torch.float64).expand(2, 3, 4)
    close(probe_logp(logps, mask), torch.full((2, 3), -1.5))
    # a float64 mask does not promote float32 log-probs
    out = probe_logp(logps.float(), mask)
    assert out.dtype == torch.float32 and out.shape == (2, 3)


def test_advantages_take_the_masks_dtype_with_float64_gold_logp():
    batch = igpo_batch(dtype=torch.float32)
    batch.extras["gold_logp"] = batch.extras["gold_logp"].double()
    adv = IGPO()(batch).advantages
    assert adv.dtype == torch.float32
    close(adv[:, 0], JOINT, atol=1e-3)


def test_separate_pools_of_three_groups_stay_apart():
    # the spec example in groups 0 and 2: each group alone gives SEPARATE (group 1 is absent)
    batch = igpo_batch(p=P * 2, outcome=F1 * 2, group=[0, 0, 0, 2, 2, 2])
    close(IGPO(norm_mode="separate")(batch).advantages[:, 0], SEPARATE * 2)


def test_one_turn_trajectories_have_no_information_gain_and_eps_is_added_to_sigma():
    # outcomes 1, 0 in one pool: μ = 0.5, σ = √(0.25 + 1e-8); eps = 0.5: A = ±0.5/(0.50000001 + 0.5) ≈ ±0.5
    out = IGPO(eps=0.5)(igpo_batch(p=[[0.3], [0.6]], outcome=[1.0, 0.0]))
    close(out.advantages[:, 0], [0.5, -0.5], atol=1e-6)
    assert out.diagnostics == {"igpo/ig_mean": 0.0, "igpo/ig_abs_mean": 0.0}


def test_an_empty_batch():
    batch = igpo_batch(p=[], outcome=[])
    batch.group = torch.zeros(0, dtype=torch.long)
    batch.extras.update(traj=torch.zeros(0, dtype=torch.long), step=torch.zeros(0, dtype=torch.long))
    out = IGPO()(batch)
    assert out.advantages.shape == (0, 2)
    assert out.diagnostics == {"igpo/ig_mean": 0.0, "igpo/ig_abs_mean": 0.0}
