"""InfoPO on step rows: the spec's infopo_fusion example (both parameter sets, every intermediate, rows
shuffled), the counterfactual IG arithmetic, gate and normalization edge cases and input validation."""
import pytest
import torch

from polo.core.advantages.infopo import InfoPO, counterfactual_gain
from polo.core.registry import ADVANTAGES, ConfigError

from .helpers import build_batch, close

# infopo_fusion (multi-turn spec §7 d): action lengths per turn (via the mask), IG credited per turn, outcome S.
LENGTHS = [[3, 2, 2], [2, 2], [2, 2, 1]]
IG = [[0.6, 0.2, 0.0], [0.1, 0.0], [-0.2, 0.3, 0.0]]
S = [1.0, 0.0, 0.0]
Z = [1.1547, -0.5773, -0.5773]
A_INT = [[0.9996] * 3, [0.0833] * 2, [0, 0], [-0.3749] * 2, [0, 0], [-1.7494] * 2, [0.5415] * 2, [0]]
CONFIG = [[1.2745] * 3, [1.1647] * 2, [1.1547] * 2, [-0.6223] * 2, [-0.5773] * 2, [-0.7870] * 2, [-0.5125] * 2,
          [-0.5773]]
FUNCTION = [[1.1547] * 3, [1.1547] * 2, [1.1547] * 2, [-0.5773] * 2, [-0.5773] * 2, [-0.5774] * 2, [-0.5773] * 2,
            [-0.5773]]
WIDTH = 3


def padded(rows):
    """Per-row token values (lists) as a [N, WIDTH] table, zeros after each row's tokens."""
    return torch.tensor([r + [0.0] * (WIDTH - len(r)) for r in rows], dtype=torch.float64)


def info_batch(lengths=LENGTHS, ig=IG, outcome=S, group=None, perm=None, dtype=torch.float64):
    traj = [i for i, ls in enumerate(lengths) for _ in ls]
    step = [k for ls in lengths for k in range(len(ls))]
    mask = [[1] * n + [0] * (WIDTH - n) for ls in lengths for n in ls]
    groups = [0] * len(lengths) if group is None else group
    batch = build_batch([outcome[i] for i in traj], [groups[i] for i in traj], mask=mask)
    batch.rewards = batch.rewards.to(dtype)
    batch.reward_weights = batch.reward_weights.to(dtype)
    batch.extras.update(traj=torch.tensor(traj), step=torch.tensor(step),
                        info_gain=torch.tensor([x for gs in ig for x in gs], dtype=dtype))
    return batch if perm is None else batch.select(perm)


def test_infopo_fusion_both_parameter_sets_in_any_row_order():
    perm = torch.randperm(8, generator=torch.Generator().manual_seed(5))
    for order in (torch.arange(8), perm):
        batch = info_batch(perm=order)
        out = InfoPO()(batch)
        close(out.advantages, padded(CONFIG)[order])
        close(torch.tensor(out.diagnostics["infopo/gate_mean"]), 0.2396)
        close(torch.tensor(out.diagnostics["infopo/magnitude_ratio"]), 1.0)
        close(InfoPO(intrinsic_weight=0.1, gate_temperature=0.05)(batch).advantages, padded(FUNCTION)[order])


def test_infopo_fusion_intermediates():
    batch = info_batch()
    mask = batch.mask > 0
    a_out = InfoPO(intrinsic_weight=0.0)(batch).advantages  # A^out on every token
    rows = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2])
    close(a_out, torch.tensor(Z, dtype=torch.float64)[rows][:, None] * batch.mask)
    a_int = InfoPO(use_intrinsic_only=True)(batch).advantages  # m·Â^I with m = 1
    close(a_int, padded(A_INT))
    close(a_out[mask].std() + 1e-6, 0.8874)  # σ_out
    close(a_int[mask].std() + 1e-6, 0.8165)  # σ_int
    # The non-zero intrinsic pool: 11 tokens, mean 0.0909, std_u 0.1091.
    raw = InfoPO(use_intrinsic_only=True, normalize_intrinsic=False)(batch).advantages
    close(raw, padded([[0.2] * 3, [0.1] * 2, [0, 0], [0.05] * 2, [0, 0], [-0.1] * 2, [0.15] * 2, [0]]))
    pool = raw[raw != 0]
    assert pool.numel() == 11
    close(pool.mean(), 0.0909)
    close(pool.std(), 0.1091)
    close(torch.tensor(InfoPO()(batch).diagnostics["infopo/intrinsic_abs_mean"]), a_int[mask].abs().mean())


def test_counterfactual_gain_arithmetic():
    obs = torch.tensor([-0.2, -0.1, -0.3], dtype=torch.float64)
    cf = torch.tensor([-1.5, -0.4, -0.5], dtype=torch.float64)
    close(counterfactual_gain(obs, cf, torch.ones(3)), 0.6)
    # Batched and padded: the padding's values never count; a row without next-action tokens gives 0.
    obs_b = torch.tensor([[-0.2, -0.1, -0.3, 9.0], [-1.0, -2.0, 5.0, 5.0], [3.0, 3.0, 3.0, 3.0]])
    cf_b = torch.tensor([[-1.5, -0.4, -0.5, -9.0], [-0.5, -0.5, float("nan"), 0.0], [0.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]])
    close(counterfactual_gain(obs_b, cf_b, mask), [0.6, -1.0, 0.0])
    with pytest.raises(ValueError, match="counterfactual_gain"):
        counterfactual_gain(obs_b, cf_b[:, :3], mask)


def test_singleton_group():
    # One trajectory alone: A^out = S (mean 0, std 1), gate = sigmoid(−1/T_gate); its only non-zero
    # intrinsic value spans 2 tokens (pool of 2 equal values) → Â^I = 0.
    batch = info_batch(lengths=[[2, 1]], ig=[[0.4, 0.0]], outcome=[0.7])
    out = InfoPO()(batch)
    close(out.advantages, [[0.7, 0.7, 0], [0.7, 0, 0]])
    close(torch.tensor(out.diagnostics["infopo/gate_mean"]), torch.sigmoid(torch.tensor(-2.0)))
    # A single non-zero intrinsic token: μ = itself, σ = 1 → 0 as well; raw values pass with the gate.
    batch = info_batch(lengths=[[1, 1]], ig=[[0.4, 0.0]], outcome=[0.7])
    close(InfoPO()(batch).advantages[:, 0], [0.7, 0.7])
    gate = float(torch.sigmoid(torch.tensor(-2.0)))
    close(InfoPO(normalize_intrinsic=False)(batch).advantages[:, 0], [0.7 + 0.5 * gate * 0.4, 0.7])


def test_all_equal_outcomes_let_the_intrinsic_term_carry():
    # Equal outcomes: A^out = 0, σ_g = 0 → gate 0.5. A^out's spread is 0, so σ_out = eps and m = min(1, 1/σ_int).
    batch = info_batch(outcome=[1.0, 1.0, 1.0])
    out = InfoPO()(batch)
    a_int = padded(A_INT)
    mask = batch.mask > 0
    m = min(1.0, 1.0 / float(a_int[mask].std() + 1e-6))
    close(out.advantages, 0.5 * 0.5 * m * a_int)
    close(torch.tensor(out.diagnostics["infopo/gate_mean"]), 0.5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_all_equal_outcomes_and_no_information_gain_give_exactly_zero(dtype):
    batch = info_batch(ig=[[0.0] * 3, [0.0] * 2, [0.0] * 3], outcome=[0.5] * 3, dtype=dtype)
    adv = InfoPO()(batch).advantages
    assert adv.dtype == dtype and (adv == 0).all()


def test_outcome_is_rounded_to_four_decimals():
    close(InfoPO()(info_batch(ig=[[0.0] * 3, [0.0] * 2, [0.0] * 3], outcome=[0.33334, 0.33331, 0.33333])).advantages,
          torch.zeros(8, WIDTH))


def test_groups_are_independent():
    lengths = LENGTHS + [[2, 1], [1]]
    batch = info_batch(lengths=lengths, ig=IG + [[0.0, 0.0], [0.0]], outcome=S + [1.0, 0.0], group=[3, 3, 3, 9, 9])
    adv = InfoPO(intrinsic_weight=0.0)(batch).advantages
    close(adv[:8], torch.tensor(Z, dtype=torch.float64)[torch.tensor([0, 0, 0, 1, 1, 2, 2, 2])][:, None]
          * batch.mask[:8])
    close(adv[8:, 0], [0.7071, 0.7071, -0.7071])  # (±0.5)/std_u 0.7071
    gate = InfoPO()(batch).diagnostics["infopo/gate_mean"]  # groups' σ_g: 0.5774 and 0.7071
    expected = (3 * torch.sigmoid(torch.tensor(-0.5774 / 0.5)) + 2 * torch.sigmoid(torch.tensor(-0.7071 / 0.5))) / 5
    close(torch.tensor(gate), expected)


def test_masked_tokens_are_exactly_zero():
    batch = info_batch()
    adv = InfoPO()(batch).advantages
    assert (adv[batch.mask == 0] == 0).all()
    # A row with no trainable token keeps 0 and drops its IG from the pool.
    batch.response_mask = batch.response_mask.clone()
    batch.response_mask[5] = 0
    adv = InfoPO()(batch).advantages
    assert (adv[5] == 0).all() and (adv[batch.mask == 0] == 0).all()


def test_deterministic():
    batch = info_batch(perm=torch.tensor([7, 1, 4, 0, 6, 2, 5, 3]))
    a, b = InfoPO()(batch), InfoPO()(batch)
    assert torch.equal(a.advantages, b.advantages) and a.diagnostics == b.diagnostics


@pytest.mark.parametrize("name", ["traj", "step", "info_gain"])
def test_missing_input_is_named(name):
    batch = info_batch()
    del batch.extras[name]
    with pytest.raises(ValueError, match=rf"infopo needs the step-row input '{name}' \[8\].*has none"):
        InfoPO()(batch)


def test_malformed_inputs_are_refused():
    batch = info_batch()
    batch.extras["info_gain"] = torch.tensor([float("nan")] + [0.0] * 7)
    with pytest.raises(ValueError, match="info_gain.*non-finite"):
        InfoPO()(batch)
    batch = info_batch()
    batch.rewards[0, 0] = float("inf")
    with pytest.raises(ValueError, match="infopo: the episode rewards"):
        InfoPO()(batch)
    batch = info_batch()
    batch.extras["step"] = torch.tensor([0, 1, 2, 0, 2, 0, 1, 2])
    with pytest.raises(ValueError, match="infopo: each trajectory's step rows"):
        InfoPO()(batch)


def test_registry_and_config_validation():
    est = ADVANTAGES.build({"name": "infopo"})
    assert isinstance(est, InfoPO) and est.intrinsic_weight == 0.5 and est.gate_temperature == 0.5
    assert est.normalize_intrinsic and not est.use_intrinsic_only
    assert InfoPO.requires == {"traj", "step", "info_gain"}
    for bad in ({"gate_temperature": 0}, {"intrinsic_weight": -0.1}, {"eps": 0}, {"decay": 0.1}):
        with pytest.raises(ConfigError, match="advantage"):
            ADVANTAGES.build({"name": "infopo", **bad})


# ---- mutation-testing kills


def test_counterfactual_gain_of_one_marked_token_keeps_the_logps_dtype():
    # one marked token: IG = (−1) − (−3) = 2, divided by n = 1
    obs = torch.tensor([[-1.0, -5.0]])
    cf = torch.tensor([[-3.0, -4.0]])
    mask = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    out = counterfactual_gain(obs, cf, mask)
    assert out.dtype == torch.float32
    close(out, [2.0])


def test_fusion_by_hand_with_a_large_eps():
    # two one-row trajectories in their own groups (σ_g = 1, gate = sigmoid(−1/0.5) = 0.119203), S = 1, −1,
    # one token each, IG = 0, 40 raw (normalize_intrinsic false), eps = 0.5:
    # A^out = ±1/(1 + 0.5) = ±0.666667; σ_out = std_u(±0.666667) + 0.5 = 0.942809 + 0.5 = 1.442809;
    # σ_int = std_u(0, 40) + 0.5 = 28.284271 + 0.5 = 28.784271; m = min(1, max(1.442809, 1)/28.784271) = 0.050125;
    # A_1 = −0.666667 + 0.5·0.119203·0.050125·40 = −0.547165
    batch = info_batch(lengths=[[1], [1]], ig=[[0.0], [40.0]], outcome=[1.0, -1.0], group=[0, 1])
    out = InfoPO(eps=0.5, normalize_intrinsic=False)(batch)
    close(out.advantages[:, 0], [0.666667, -0.547165], atol=1e-5)
    d = out.diagnostics
    assert d["infopo/magnitude_ratio"] == pytest.approx(0.050125, abs=1e-6)
    assert d["infopo/gate_mean"] == pytest.approx(0.119203, abs=1e-6)
    assert d["infopo/intrinsic_abs_mean"] == pytest.approx(20.0)


def test_one_token_has_no_spread_and_one_row_scores_its_own_return():
    # one trajectory of one row and one token: S = 0.7 (its own return), alone in its group: A^out = 0.7/(1 + 1e-6);
    # its one intrinsic token normalizes to 0; both stds of one value are 0, so m = min(1, 1/1e-6) = 1
    out = InfoPO()(info_batch(lengths=[[1]], ig=[[0.3]], outcome=[0.7]))
    close(out.advantages[:, 0], [0.7 / (1 + 1e-6)], atol=1e-6)
    assert out.diagnostics["infopo/magnitude_ratio"] == 1.0


def test_intrinsic_statistics_are_per_group():
    # group 0: x = 0.1, 0.3 (μ 0.2, std_u 0.141421) → Â^I = ∓0.707102; group 1: x = 1, 2 (μ 1.5, std_u 0.707107)
    # → ∓0.707106; every |Â^I| ≈ 0.7071 (pooled over both groups they would not be)
    batch = info_batch(lengths=[[1], [1], [1], [1]], ig=[[0.1], [0.3], [1.0], [2.0]], outcome=[1.0, 0.0, 1.0, 0.0],
                       group=[0, 0, 1, 1])
    assert InfoPO()(batch).diagnostics["infopo/intrinsic_abs_mean"] == pytest.approx(0.70710, abs=1e-4)
    # eps = 0.5: 0.1/(0.141421 + 0.5) = 0.155907 and 0.5/(0.707107 + 0.5) = 0.414214, mean 0.285060
    assert InfoPO(eps=0.5)(batch).diagnostics["infopo/intrinsic_abs_mean"] == pytest.approx(0.285060, abs=1e-5)


def test_float64_info_gain_does_not_promote_float32_advantages():
    batch = info_batch(dtype=torch.float32)
    batch.extras["info_gain"] = batch.extras["info_gain"].double()
    assert InfoPO()(batch).advantages.dtype == torch.float32


def test_an_empty_batch_and_a_batch_without_trainable_tokens():
    batch = info_batch().select(torch.zeros(0, dtype=torch.long))
    assert InfoPO()(batch).diagnostics == {"infopo/gate_mean": 0.0, "infopo/magnitude_ratio": 1.0,
                                           "infopo/intrinsic_abs_mean": 0.0}
    batch = info_batch(lengths=[[1], [1]], ig=[[0.1], [0.3]], outcome=[1.0, 0.0])
    batch.response_mask = torch.zeros_like(batch.response_mask)
    assert InfoPO()(batch).diagnostics["infopo/intrinsic_abs_mean"] == 0.0
