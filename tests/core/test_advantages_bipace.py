"""BiPACE on step rows: the spec's bigpo_cluster and pace_q_r examples, BiGPO clusters against GiGPO's anchor
groups (orthogonal hidden states, aliased anchors), the hidden-state input, edge cases and validation."""
import pytest
import torch
import torch.nn.functional as F

from polo.core.advantages.bipace import BiPACE, bigpo_clusters, centred_units, pace_advantage, unit_hidden
from polo.core.advantages.gigpo import GiGPO
from polo.core.registry import ADVANTAGES, ConfigError

from . import test_advantages_gigpo as gig
from .helpers import close

# bigpo_cluster (multi-turn spec §4 d): 2-d hidden states in canonical order, tau_d = 0.1.
H_CLUSTER = [[1, 0], [0.99, 0.14], [0, 1], [0.1, 0.995], [0.7, 0.7]]
# pace_q_r (§4 d): one cluster, returns G and actions up, up, right, right, left.
G_PACE = [0.9025, 0.95, 0.0, 0.857375, 0.0]
ACT_PACE = [0, 0, 1, 1, 2]
PACE_Q = [0.3843, 0.3843, -0.1133, -0.1133, -0.5420]
PACE_R = [0.6167, 0.6642, -0.6175, 0.2399, -0.6775]
GIGPO_STYLE = [0.3605, 0.4080, -0.5420, 0.3154, -0.5420]
PACE_Q_STD = [0.7750, 0.7750, -0.2285, -0.2285, -1.0931]


def unit(rows):
    return F.normalize(torch.as_tensor(rows, dtype=torch.float64), dim=-1)


def bipace_batch(hidden, action_key=None, perm=None, **kw):
    """gigpo_basic's rows (or ``kw`` overrides) with ``hidden`` [N, d] and ``action_key`` (default: the row)."""
    batch = gig.step_batch(**kw)
    N = batch.batch_size
    batch.extras["context_hidden"] = torch.as_tensor(hidden, dtype=torch.float64)
    batch.extras["action_key"] = torch.arange(N) if action_key is None else torch.as_tensor(action_key)
    return batch if perm is None else batch.select(perm)


def pace_batch(actions=ACT_PACE, dtype=torch.float64):
    """Five one-step trajectories whose step reward is G, one shared hidden state (one cluster), distinct
    anchors: the step term is PACE's on the pace_q_r cluster."""
    batch = gig.step_batch(episode=[1.0] * 5, traj=[0, 1, 2, 3, 4], step=[0] * 5, anchor=[0, 1, 2, 3, 4],
                           step_reward=G_PACE, dtype=dtype)
    batch.extras.update(context_hidden=torch.ones(5, 3, dtype=dtype), action_key=torch.tensor(actions))
    return batch


def row_adv(est, batch):
    return est(batch).advantages[:, 0]


# ------------------------------------------------------------------------------------------- bigpo_cluster


def test_bigpo_cluster_example():
    z = torch.zeros(5, dtype=torch.long)
    u = unit(H_CLUSTER)
    assert bigpo_clusters(u, z, torch.zeros(5, dtype=torch.long), torch.arange(5), None, 0.1, False).tolist() == \
        [0, 0, 1, 1, 2]
    # The spec's cosines: h1 vs c0 0.9901, h3 vs c1 0.9950, h4's best (c0) 0.7550, so distance 0.245.
    c0, c1 = F.normalize(u[0] + u[1], dim=0), F.normalize(u[2] + u[3], dim=0)
    close(torch.stack([u[1] @ u[0], u[2] @ c0, u[3] @ u[2], u[4] @ c0]),
          [0.9901, 0.0702, 0.9950, 0.7550], atol=2e-4)
    assert u[4] @ c0 > u[4] @ c1
    # Threshold boundary: at tau_d 0.25, h4 joins its nearest centroid c0 (argmax, not first fit).
    assert bigpo_clusters(u, z, z, torch.arange(5), None, 0.25, False).tolist() == [0, 0, 1, 1, 0]
    assert bigpo_clusters(u, z, z, torch.arange(5), None, 0.0, False).tolist() == [0, 1, 2, 3, 4]


def test_bigpo_cluster_uses_canonical_order_not_row_order():
    # As five one-step trajectories with traj ids in canonical order; the rows arrive shuffled.
    u = unit(H_CLUSTER)
    perm = torch.tensor([3, 0, 4, 2, 1])
    z = torch.zeros(5, dtype=torch.long)
    traj = torch.tensor([10, 11, 12, 13, 14])
    ids = bigpo_clusters(u[perm], z, traj[perm], z, None, 0.1, False)
    assert ids.tolist() == torch.tensor([0, 0, 1, 1, 2])[perm].tolist()


def test_bigpo_clusters_stay_inside_groups():
    u = unit(H_CLUSTER * 2)
    group = torch.tensor([7] * 5 + [2] * 5)
    traj = torch.tensor([0] * 5 + [1] * 5)
    ids = bigpo_clusters(u, group, traj, torch.arange(10) % 5, None, 0.1, False)
    # group 2 sorts first: its clusters get ids 0..2, group 7's 3..5
    assert ids.tolist() == [3, 3, 4, 4, 5, 0, 0, 1, 1, 2]


def test_exact_atoms_merge_before_clustering():
    # Rows 0 and 2 share anchor 5; their atom vector is normalize(u0 + u2) = (1, 1)/√2, far from both alone.
    u = unit([[1, 0], [1, 0.05], [0, 1]])
    z = torch.zeros(3, dtype=torch.long)
    anchor = torch.tensor([5, 6, 5])
    assert bigpo_clusters(u, z, z, torch.arange(3), anchor, 0.1, True).tolist() == [0, 1, 0]
    assert bigpo_clusters(u, z, z, torch.arange(3), anchor, 0.1, False).tolist() == [0, 0, 1]


# ------------------------------------------------------------------------------------------------ pace_q_r


def test_pace_q_r_example_directly():
    G, z, a = torch.tensor(G_PACE, dtype=torch.float64), torch.zeros(5, dtype=torch.long), torch.tensor(ACT_PACE)
    close(pace_advantage(G, z, a, "Q", "mean", 1e-6), PACE_Q)
    close(pace_advantage(G, z, a, "R", "mean", 1e-6), PACE_R)
    close(pace_advantage(G, z, a, "Q", "mean_std", 1e-6), PACE_Q_STD)
    close(pace_advantage(G, z, torch.arange(5), "Q", "mean", 1e-6), GIGPO_STYLE)  # distinct actions: G − V̂
    close(pace_advantage(G, z, torch.zeros(5, dtype=torch.long), "R", "mean", 1e-6), GIGPO_STYLE)  # R fallback
    assert (pace_advantage(G, z, torch.zeros(5, dtype=torch.long), "Q", "mean", 1e-6) == 0).all()


@pytest.mark.parametrize("variant, mode, expected", [
    ("Q", "mean_norm", PACE_Q), ("R", "mean_norm", PACE_R), ("Q", "mean_std_norm", PACE_Q_STD)])
def test_pace_q_r_example_through_the_estimator(variant, mode, expected):
    batch = pace_batch()
    full = row_adv(BiPACE(variant=variant, mode=mode), batch)
    episode_only = row_adv(BiPACE(variant=variant, mode=mode, step_advantage_w=0), batch)
    assert (episode_only == 0).all()  # every episode reward equal
    close(full - episode_only, expected)
    close(row_adv(BiPACE(variant=variant, mode=mode, step_advantage_w=0.5), batch), 0.5 * torch.tensor(expected))
    out = BiPACE(variant=variant, mode=mode)(batch)
    assert out.diagnostics["bipace/clusters"] == 1 and out.diagnostics["bipace/cluster_size_mean"] == 5
    assert out.diagnostics["bipace/singleton_frac"] == 0 and out.diagnostics["bipace/exact_singleton_frac"] == 1
    close(torch.tensor(out.diagnostics["bipace/step_adv_abs_mean"]), torch.tensor(expected).abs().mean())


# ------------------------------------------------------------------------ BiGPO vs GiGPO's anchor groups


@pytest.mark.parametrize("merge", [True, False])
@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_orthogonal_hidden_per_anchor_reproduces_gigpo(mode, merge):
    # One orthogonal direction per anchor (with row-specific noise well inside tau_d): clusters = anchor
    # groups; with a distinct action per row, PACE_Q = G − V̂ = GiGPO's step term.
    noise = 0.02 * torch.randn(10, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    hidden = F.one_hot(torch.tensor(gig.ANCHOR), 5).double() + noise
    batch = bipace_batch(hidden)
    anchor, group = torch.tensor(gig.ANCHOR), torch.zeros(10, dtype=torch.long)
    ids = bigpo_clusters(unit(hidden), group, torch.tensor(gig.TRAJ), torch.tensor(gig.STEP), anchor, 0.1, merge)
    assert ids.tolist() == [0, 1, 2, 0, 3, 1, 2, 0, 3, 4]  # s0 s1 s2 s3 s4 in canonical order of first visit
    est = BiPACE(mode=mode, merge_exact_obs_first=merge)
    close(row_adv(est, batch), row_adv(GiGPO(mode=mode), batch), atol=1e-12)
    d = est(batch).diagnostics
    assert d["bipace/singleton_frac"] == d["bipace/exact_singleton_frac"] == 0.2
    assert d["bipace/clusters"] == 5 and d["bipace/cluster_size_mean"] == 2.0


def test_aliased_anchors_are_split_without_exact_merge():
    # τ3's first step carries anchor s0 but its hidden state points elsewhere (an aliased observation).
    hidden = F.one_hot(torch.tensor(gig.ANCHOR), 6).double()
    hidden[7] = F.one_hot(torch.tensor(5), 6).double()
    batch = bipace_batch(hidden)
    args = (unit(hidden), torch.zeros(10, dtype=torch.long), torch.tensor(gig.TRAJ), torch.tensor(gig.STEP),
            torch.tensor(gig.ANCHOR), 0.1)
    merged, split = bigpo_clusters(*args, True), bigpo_clusters(*args, False)
    assert merged[7] == merged[0] == merged[3]
    assert split[0] == split[3] != split[7] and (split == split[7]).sum() == 1
    a_merged = row_adv(BiPACE(), batch)
    a_split = row_adv(BiPACE(merge_exact_obs_first=False), batch)
    close(a_merged, row_adv(GiGPO(), batch))
    # split: s0 = {0.9025, 0.8574} (mean 0.8799), τ3's row alone (step term 0); A^E unchanged
    close(a_split[[0, 3, 7]], [0.3 + 0.0226, 0.3 - 0.0226, -0.7])
    close(a_split[[1, 2, 4, 5, 6, 8, 9]], a_merged[[1, 2, 4, 5, 6, 8, 9]])
    assert BiPACE(merge_exact_obs_first=False)(batch).diagnostics["bipace/singleton_frac"] == pytest.approx(2 / 6)


def test_hidden_clusters_fill_singleton_anchor_groups():
    # No anchor recurs (every exact group a singleton), yet equal hidden states per true state regroup them.
    hidden = F.one_hot(torch.tensor(gig.ANCHOR), 5).double()
    batch = bipace_batch(hidden, anchor=list(range(10)))
    close(row_adv(BiPACE(), batch), gig.FINAL["mean_norm", "steps"])
    d = BiPACE()(batch).diagnostics
    assert d["bipace/exact_singleton_frac"] == 1.0 and d["bipace/singleton_frac"] == 0.2


def test_near_collinear_hidden_states_cluster_by_state_once_centred():
    # A decoder's hidden states share one dominant direction (shipped TextGrid run: the mean unit vector has norm
    # 0.99): a shared vector 100x larger than the per-state part puts every pair of steps at cosine distance
    # ~2.5e-5, so raw clustering at tau_d 0.1 makes one cluster of the task; centred on the task's mean, the
    # steps cluster by true state again and BiPACE equals GiGPO on the true anchors.
    states = torch.tensor(gig.ANCHOR)
    hidden = 100.0 * torch.ones(10, 5, dtype=torch.float64) + 0.5 * F.one_hot(states, 5).double()
    batch = bipace_batch(hidden, anchor=list(range(10)))
    centred, raw = BiPACE()(batch), BiPACE(centre=False)(batch)
    assert raw.diagnostics["bipace/clusters_per_task"] == 1.0
    assert centred.diagnostics["bipace/clusters_per_task"] == len(states.unique()) == 5
    close(centred.advantages[:, 0], gig.FINAL["mean_norm", "steps"])
    # the clusters follow states that differ in value: their returns spread less than the task's
    assert centred.diagnostics["bipace/return_var_ratio"] < 0.5 < raw.diagnostics["bipace/return_var_ratio"] == 1.0


def test_rows_at_their_group_mean_share_one_direction():
    # every row of a group holds the same state: centred it is the zero vector, yet the rows cluster together
    same = torch.ones(4, 3, dtype=torch.float64)
    batch = bipace_batch(same, anchor=[0, 1, 2, 3], episode=[1.0, 0.0, 1.0, 0.0], traj=[0, 1, 2, 3], step=[0] * 4,
                         step_reward=[1.0, 0.0, 1.0, 0.0])
    assert BiPACE()(batch).diagnostics["bipace/clusters"] == 1.0


# ----------------------------------------------------------------------------------------- hidden input


@pytest.mark.parametrize("value, match", [
    (None, "has none"),
    (torch.zeros(9, 4), r"shape \(9, 4\)"),
    (torch.zeros(10, 4, dtype=torch.long), "dtype torch.int64"),
    (torch.full((10, 4), float("nan")), "non-finite"),
])
def test_bad_hidden_is_refused(value, match):
    batch = bipace_batch(torch.eye(10))
    if value is None:
        del batch.extras["context_hidden"]
    else:
        batch.extras["context_hidden"] = value
    with pytest.raises(ValueError, match=match):
        BiPACE()(batch)


# ------------------------------------------------------------------------------------------- edge cases


@pytest.mark.parametrize("variant", ["Q", "R"])
def test_rows_shuffled_give_the_same_per_row_answer(variant):
    hidden = torch.randn(10, 4, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    actions = [0, 1, 0, 1, 0, 1, 0, 0, 1, 1]
    base = BiPACE(variant=variant, tau_d=0.8, merge_exact_obs_first=False)
    ref = row_adv(base, bipace_batch(hidden, actions))
    perm = torch.randperm(10, generator=torch.Generator().manual_seed(5))
    close(row_adv(base, bipace_batch(hidden, actions, perm=perm)), ref[perm], atol=1e-12)
    assert base(bipace_batch(hidden, actions)).diagnostics == base(bipace_batch(hidden, actions, perm=perm)).diagnostics


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("variant", ["Q", "R"])
@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_all_equal_group_gives_exactly_zero(mode, variant, dtype):
    batch = gig.step_batch(episode=[10.0] * 9, traj=[0, 0, 0, 1, 1, 1, 2, 2, 2], step=[0, 1, 2] * 3,
                           anchor=[0, 1, 2] * 3, step_reward=[0.1, 0.1, 1.0] * 3, dtype=dtype)
    # hidden states one direction per state (turn): three clusters, each of three equal returns
    hidden = F.one_hot(torch.tensor([0, 1, 2] * 3), 3).to(dtype) + 0.01 * torch.arange(9, dtype=dtype)[:, None]
    batch.extras.update(context_hidden=hidden, action_key=torch.tensor([0, 1, 2, 1, 1, 0, 2, 2, 2]))
    adv = BiPACE(mode=mode, variant=variant)(batch).advantages
    assert adv.dtype == dtype and (adv == 0).all()


def test_single_trajectory_and_single_row():
    one = gig.step_batch(episode=[0.4], traj=[3], step=[0], anchor=[8], step_reward=[0.4])
    one.extras.update(context_hidden=torch.ones(1, 2), action_key=torch.tensor([0]))
    for mode in ("mean_norm", "mean_std_norm"):
        close(row_adv(BiPACE(mode=mode), one), [0.4])  # episode singleton keeps R, cluster singleton gives 0
    # one trajectory whose three steps look alike: one cluster, distinct actions → G − mean G
    traj = gig.step_batch(episode=[1.0] * 3, traj=[0] * 3, step=[0, 1, 2], anchor=[0, 1, 2], step_reward=[0, 0, 1])
    traj.extras.update(context_hidden=torch.ones(3, 2), action_key=torch.tensor([0, 1, 2]))
    close(row_adv(BiPACE(), traj), torch.tensor([0.9025, 0.95, 1.0]) - 0.950833)


def test_masked_tokens_get_exactly_zero():
    mask = [[1, 1, 1]] * 8 + [[1, 0, 0], [0, 0, 0]]
    hidden = F.one_hot(torch.tensor(gig.ANCHOR), 5).double()
    adv = BiPACE()(bipace_batch(hidden, mask=mask)).advantages
    m = torch.tensor(mask)
    assert (adv[m == 0] == 0).all()
    close(adv[:8], torch.tensor(gig.FINAL["mean_norm", "steps"][:8])[:, None].expand(8, 3))


def test_deterministic():
    hidden = torch.randn(10, 4, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    batch = bipace_batch(hidden, [0, 1] * 5, perm=torch.tensor([9, 3, 0, 5, 1, 8, 2, 7, 4, 6]))
    est = BiPACE(mode="mean_std_norm", tau_d=0.7, variant="R")
    a, b = est(batch), est(batch)
    assert torch.equal(a.advantages, b.advantages) and a.diagnostics == b.diagnostics


def test_non_finite_and_missing_inputs_are_refused():
    batch = bipace_batch(torch.eye(10))
    batch.rewards[0, 0] = float("nan")
    with pytest.raises(ValueError, match="bipace: the episode rewards"):
        BiPACE()(batch)
    batch = bipace_batch(torch.eye(10))
    batch.extras["step_reward"][2] = float("nan")
    with pytest.raises(ValueError, match="'step_reward'.*non-finite"):
        BiPACE()(batch)
    for name in ("action_key", "anchor", "traj"):
        batch = bipace_batch(torch.eye(10))
        del batch.extras[name]
        with pytest.raises(ValueError, match=rf"bipace needs the step-row input '{name}' \[10\]"):
            BiPACE()(batch)
    batch = bipace_batch(torch.eye(10), action_key=torch.zeros(10))
    with pytest.raises(ValueError, match="'action_key'.*integer dtype"):
        BiPACE()(batch)
    with pytest.raises(ValueError, match="exactly once"):
        BiPACE()(bipace_batch(torch.eye(10), step=[0, 1, 1, 0, 1, 2, 3, 0, 1, 2]))


def test_needs_and_config():
    assert BiPACE().needs() == {"traj", "step", "anchor", "step_reward", "action_key", "context_hidden"} == \
        set(BiPACE.requires)
    assert BiPACE(step_advantage_w=0).needs() == set()
    assert BiPACE(step_advantage_w=0, stats_over="trajectories").needs() == {"traj"}
    batch = gig.step_batch()  # no hidden, no action_key: fine for the episode term alone
    close(row_adv(BiPACE(step_advantage_w=0), batch), gig.A_EP["mean_norm", "steps"])
    est = ADVANTAGES.build({"name": "bipace", "variant": "R", "tau_d": 0.2})
    assert isinstance(est, BiPACE) and est.tau_d == 0.2 and est.merge_exact_obs_first
    assert BiPACE().tau_d == 0.1 and BiPACE().variant == "Q"
    for bad in ({"variant": "V"}, {"tau_d": -0.1}, {"gamma": 2}, {"eps": 0}, {"step_advantage_w": -1},
                {"enable_similarity": True}):
        with pytest.raises(ConfigError, match="advantage"):
            ADVANTAGES.build({"name": "bipace", **bad})


def reference_clusters(u, group, traj, step, anchor, tau_d, merge):
    """Plain-Python leader clustering, one row at a time, as the spec states it."""
    rows = sorted(range(len(u)), key=lambda n: (int(traj[n]), int(step[n])))
    out = {}
    for g in sorted(set(group.tolist())):
        atoms, keys = [], {}
        for n in rows:
            if int(group[n]) != g:
                continue
            key = int(anchor[n]) if merge else ("row", n)
            if key not in keys:
                keys[key] = len(atoms)
                atoms.append([])
            atoms[keys[key]].append(n)
        clusters = []
        for members in atoms:
            x = F.normalize(u[members].sum(0), dim=0)
            cos = [float(x @ F.normalize(u[c].sum(0), dim=0)) for c in clusters]
            j = max(range(len(cos)), key=lambda i: (cos[i], -i)) if cos else None
            if j is not None and 1 - cos[j] <= tau_d:
                clusters[j] += members
            else:
                clusters.append(list(members))
        out.update({n: (g, j) for j, c in enumerate(clusters) for n in c})
    labels = sorted(set(out.values()))
    return [labels.index(out[n]) for n in range(len(u))]


@pytest.mark.parametrize("merge", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_bigpo_clusters_match_a_plain_reference(seed, merge):
    gen = torch.Generator().manual_seed(seed)
    n_traj, T = 12, 6
    traj = torch.arange(n_traj).repeat_interleave(T)
    step = torch.arange(T).repeat(n_traj)
    group = (traj // 4) * 3 + 1  # three groups of four trajectories
    anchor = torch.randint(0, 5, (n_traj * T,), generator=gen)
    centres = torch.randn(5, 8, generator=gen, dtype=torch.float64)
    u = unit(centres[anchor] + 0.6 * torch.randn(n_traj * T, 8, generator=gen, dtype=torch.float64))
    perm = torch.randperm(n_traj * T, generator=gen)
    for tau in (0.05, 0.2, 0.5):
        got = bigpo_clusters(u[perm], group[perm], traj[perm], step[perm], anchor[perm], tau, merge)
        expected = torch.tensor(reference_clusters(u, group, traj, step, anchor, tau, merge))[perm]
        assert got.tolist() == expected.tolist()


# ---- mutation-testing kills

E_LAST = [0.0, 0.0, 1.0]  # centred_units' direction of a row at its group's centre (2-d hidden states)


def clusters(rows, tau_d, **kw):
    """bigpo_clusters of one group of one-step trajectories in row order, every row its own atom by default."""
    u = torch.as_tensor(rows, dtype=torch.float64)
    n = len(u)
    z = torch.zeros(n, dtype=torch.long)
    anchor = kw.pop("anchor", None)
    return bigpo_clusters(u, z, torch.arange(n), z, None if anchor is None else torch.tensor(anchor), tau_d,
                          kw.pop("merge", False)).tolist()


def test_bigpo_clusters_merge_exact_anchors_by_default_and_need_them():
    u = unit([[1, 0], [1, 0.05], [0, 1]])  # as test_exact_atoms_merge_before_clustering
    z = torch.zeros(3, dtype=torch.long)
    assert bigpo_clusters(u, z, z, torch.arange(3), torch.tensor([5, 6, 5]), 0.1).tolist() == [0, 1, 0]
    with pytest.raises(ValueError, match="^bigpo_clusters: merge_exact needs the anchor ids$"):
        bigpo_clusters(u, z, z, torch.arange(3), None, 0.1)


def test_bigpo_clusters_of_no_rows_and_of_float32_units():
    none = torch.zeros(0, dtype=torch.long)
    ids = bigpo_clusters(torch.zeros(0, 2, dtype=torch.float64), none, none, none, none, 0.1)
    assert ids.dtype == torch.long and ids.shape == (0,)
    z = torch.zeros(5, dtype=torch.long)
    assert bigpo_clusters(unit(H_CLUSTER).float(), z, z, torch.arange(5), None, 0.1, False).tolist() == \
        [0, 0, 1, 1, 2]


def test_bigpo_cosines_are_exact_in_float64_at_the_threshold():
    # u0·u1 = 0.7 (float32 would round it down to 0.69999998): distance 0.3 joins at tau 0.3 + 1e-12 only
    u0, u1 = [1.0, 0.0], [0.7, 0.51 ** 0.5]
    assert clusters([u0, u1], 0.3 + 1e-12) == [0, 0] and clusters([u0, u1], 0.3 - 1e-12) == [0, 1]
    # S = u0 + u1 has ‖S‖² = 2 + 2·0.7 = 3.4 (float32 rounds it up by 9.5e-8); u2 at cosine 0.6 to S (distance
    # 0.4): joins at tau 0.4 + 1e-12, and u1 joins u0 (0.3 ≤ tau)
    s = torch.tensor([1.7, 0.51 ** 0.5], dtype=torch.float64)
    s = s / s.norm()
    u2 = 0.6 * s + 0.8 * torch.stack([-s[1], s[0]])
    assert clusters([u0, u1, u2.tolist()], 0.4 + 1e-12) == [0, 0, 0]
    assert clusters([u0, u1, u2.tolist()], 0.4 - 1e-12) == [0, 0, 1]


def test_nearly_cancelling_vectors_keep_their_true_direction():
    # an atom of u1 = (1, 0) and u2 = (−0.9, 0.4359) (anchor 1) sums to (0.1, 0.4359), norm 0.4472: its direction
    # is row 0's exactly, cosine 1 (not 0.4472 as if its norm were at least 1)
    u1, u2 = torch.tensor([1.0, 0.0], dtype=torch.float64), torch.tensor([-0.9, 0.19 ** 0.5], dtype=torch.float64)
    r0 = F.normalize(u1 + u2, dim=0)
    assert clusters([r0.tolist(), u1.tolist(), u2.tolist()], 0.1, anchor=[0, 1, 1], merge=True) == [0, 0, 0]
    # a cluster of u1 and u2 (distance 1.9 ≤ 1.95) whose sum has norm 0.4472: −(its direction) is at cosine −1
    # (distance 2 > 1.95), so it opens a cluster (it would join at cosine −0.4472)
    assert clusters([u1.tolist(), u2.tolist(), (-r0).tolist()], 1.95) == [0, 0, 1]


def test_identical_atoms_join_at_tau_zero():
    assert clusters([[1.0, 0.0], [1.0, 0.0]], 0.0) == [0, 0]  # 1 − cos = 0 ≤ 0


def test_only_opened_clusters_are_candidates_and_a_join_opens_none():
    # tau 1: (−0.5, ±0.866) are at cosine −0.5 from (1, 0) and from each other (distance 1.5 > 1): three clusters
    # (an unopened slot, at cosine 0, must not take them)
    r3 = 0.75 ** 0.5
    assert clusters([[1.0, 0.0], [-0.5, r3], [-0.5, -r3]], 1.0) == [0, 1, 2]
    # tau 1.6: the copy of (1, 0) joins cluster 0; (−0.5, 0.866) is at distance 1.5 ≤ 1.6 from it and joins too
    assert clusters([[1.0, 0.0], [1.0, 0.0], [-0.5, r3]], 1.6) == [0, 0, 0]


def test_missing_or_bad_hidden_error_texts():
    where = (r"^advantage bipace needs the input 'context_hidden': the policy's hidden state at each row's last "
             r"context token, \[10, d\]; ")
    batch = bipace_batch(torch.eye(10))
    del batch.extras["context_hidden"]
    with pytest.raises(ValueError, match=where + "the batch has none"):
        BiPACE()(batch)
    with pytest.raises(ValueError, match=where + r"got shape \(9, 4\) and dtype torch.float64$"):
        BiPACE()(bipace_batch(torch.zeros(9, 4)))


def test_uncentred_units_normalize_each_row():
    batch = bipace_batch([[3.0, 4.0]] * 5 + [[0.0, 2.0]] * 5)
    close(unit_hidden(batch, "x", False), [[0.6, 0.8]] * 5 + [[0.0, 1.0]] * 5, atol=1e-12)


def test_centred_units_by_hand():
    # group 0 holds one state twice (at its centre: e_last), group 1 departs by ±(0.5, −0.5): ±(0.7071, −0.7071, 0);
    # a lone row (group 2) is its group's mean; a group of zero vectors is at its centre (0 ≤ 1e-5·0)
    h = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0], [0.0, 1.0], [3.0, 4.0], [0.0, 0.0], [0.0, 0.0]],
                     dtype=torch.float64)
    s = 0.5 ** 0.5
    close(centred_units(h, torch.tensor([0, 0, 1, 1, 2, 3, 3])),
          [E_LAST, E_LAST, [s, -s, 0.0], [-s, s, 0.0], E_LAST, E_LAST, E_LAST], atol=1e-12)
    # ‖h − mean‖ = 1e-4 is within 1e-5·‖h‖ = 0.01 of a state of norm 1000: at the centre; rows of norm 1e-3
    # departing by 7.1e-4 are not (each row against its own norm, not the batch's)
    h = torch.tensor([[1000.0, 0.0], [1000.0, 2e-4], [1e-3, 0.0], [0.0, 1e-3]], dtype=torch.float64)
    close(centred_units(h, torch.tensor([0, 0, 1, 1])), [E_LAST, E_LAST, [s, -s, 0.0], [-s, s, 0.0]], atol=1e-12)
    assert centred_units(torch.zeros(0, 2, dtype=torch.float64), torch.zeros(0, dtype=torch.long)).shape == (0, 3)


def test_pace_r_with_one_peer_and_no_rows():
    # one cluster, G = [1, 0, 4], actions [0, 0, 1]: rows 0 and 1 have the one peer row 2, row 2 has both:
    # 1 − 4 = −3, 0 − 4 = −4, 4 − (1 + 0)/2 = 3.5
    G, z = torch.tensor([1.0, 0.0, 4.0], dtype=torch.float64), torch.zeros(3, dtype=torch.long)
    close(pace_advantage(G, z, torch.tensor([0, 0, 1]), "R", "mean", 1e-6), [-3.0, -4.0, 3.5], atol=1e-12)
    none = torch.zeros(0, dtype=torch.long)
    for variant in ("Q", "R"):
        assert pace_advantage(torch.zeros(0, dtype=torch.float64), none, none, variant, "mean", 1e-6).shape == (0,)


def test_episode_term_alone_leaves_masked_tokens_at_zero():
    mask = [[1, 1, 1]] * 8 + [[1, 0, 0], [0, 0, 0]]
    adv = BiPACE(step_advantage_w=0)(bipace_batch(torch.eye(10), mask=mask)).advantages
    assert (adv[torch.tensor(mask) == 0] == 0).all()
    close(adv[:, 0], torch.tensor(gig.A_EP["mean_norm", "steps"]) * torch.tensor([1.0] * 9 + [0.0]))


def test_float32_rewards_give_float32_advantages_with_float64_step_rewards():
    batch = bipace_batch(F.one_hot(torch.tensor(gig.ANCHOR), 5).float())
    batch.rewards = batch.rewards.float()
    batch.reward_weights = batch.reward_weights.float()
    out = BiPACE()(batch).advantages
    assert out.dtype == torch.float32
    close(out[:, 0], gig.FINAL["mean_norm", "steps"])


def test_diagnostics_of_singleton_clusters_in_two_tasks_and_of_no_rows():
    # two tasks of two one-step rows, returns [1, 0] each: centred, a task's two states point opposite ways,
    # so 4 singleton clusters, 2 a task; every return is its cluster's mean (spread 0) against the task's
    # spread mean((±0.5)²) = 0.25: ratio 0
    batch = bipace_batch([[1.0, 0.0], [0.0, 1.0]] * 2, episode=[1.0, 0.0] * 2, traj=[0, 1, 2, 3], step=[0] * 4,
                         anchor=[0, 1, 2, 3], step_reward=[1.0, 0.0] * 2, group=[0, 0, 1, 1])
    d = BiPACE()(batch).diagnostics
    assert d["bipace/clusters"] == 4.0 and d["bipace/clusters_per_task"] == 2.0
    assert d["bipace/return_var_ratio"] == 0.0 and d["bipace/singleton_frac"] == 1.0
    # one row: the task's spread is 0, so the ratio is 1
    one = bipace_batch([[1.0, 2.0]], episode=[0.4], traj=[3], step=[0], anchor=[8], step_reward=[0.4])
    assert BiPACE()(one).diagnostics["bipace/return_var_ratio"] == 1.0
    # no rows at all: every diagnostic 0, the ratio 1
    empty = bipace_batch(torch.zeros(0, 3), episode=[], traj=[], step=[], anchor=[], step_reward=[])
    none = torch.zeros(0, dtype=torch.long)
    empty.group = none
    empty.extras.update(traj=none, step=none, anchor=none, action_key=none)
    out = BiPACE()(empty)
    assert out.advantages.shape == (0, 3)
    assert out.diagnostics == {"bipace/clusters": 0.0, "bipace/clusters_per_task": 0.0,
                               "bipace/return_var_ratio": 1.0, "bipace/cluster_size_mean": 0.0,
                               "bipace/singleton_frac": 0.0, "bipace/exact_singleton_frac": 0.0,
                               "bipace/step_adv_abs_mean": 0.0}
