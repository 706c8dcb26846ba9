"""G2PO on step rows: the spec's g2po_basic example (both edge statistics, rows shuffled), the terminal sink,
edge cases and input validation."""
import pytest
import torch

from polo.core.advantages.g2po import G2PO
from polo.core.registry import ADVANTAGES, ConfigError

from . import test_advantages_gigpo as gig
from .helpers import close

# g2po_basic (multi-turn spec §5 d), gigpo_basic's rollouts: τ1 s0→s1→s2→⊥, τ2 s0→s3→s1→s2→⊥, τ3 s0→s3→s4→⊥.
NEXT = [1, 2, -1, 3, 1, 2, -1, 3, 4, -1]
# TD errors per row: (s0→s1) 0.3159, (s1→s2) 0, (s2→⊥) 0, (s0→s3) −0.1579, (s3→s1) 0.4512, (s3→s4) −0.4512,
# (s4→⊥) 0; over the 7 distinct edges mean 0.0226, std_u 0.2968.
DELTA = [0.3159, 0, 0, -0.1579, 0.4512, 0, 0, -0.1579, -0.4512, 0]
A_UNIQUE = [0.9884, -0.0760, -0.0760, -0.6082, 1.4445, -0.0760, -0.0760, -0.6082, -1.5966, -0.0760]
# edge_stats="instances": mean 0.0000, std_u 0.2488 over the 10 rows (δ / 0.2488, from unrounded δ)
A_INSTANCES = [1.2698, 0, 0, -0.6349, 1.8140, 0, 0, -0.6349, -1.8140, 0]


def g2po_batch(next_anchor=NEXT, perm=None, **kw):
    batch = gig.step_batch(**kw)
    batch.extras["next_anchor"] = torch.tensor(next_anchor)
    return batch if perm is None else batch.select(perm)


def row_adv(est, batch):
    return est(batch).advantages[:, 0]


@pytest.mark.parametrize("stats, expected", [("unique", A_UNIQUE), ("instances", A_INSTANCES)])
def test_g2po_basic_in_any_row_order(stats, expected):
    perm = torch.randperm(10, generator=torch.Generator().manual_seed(11))
    for order in (torch.arange(10), perm):
        out = G2PO(edge_stats=stats)(g2po_batch(perm=order))
        close(out.advantages[:, 0], torch.tensor(expected)[order])
        assert out.diagnostics["g2po/nodes"] == 5 and out.diagnostics["g2po/edges"] == 7
        close(torch.tensor(out.diagnostics["g2po/td_abs_mean"]), (0.3159 + 0.1579 + 0.4512 + 0.4512) / 7)


def test_g2po_basic_statistics():
    delta = torch.tensor(DELTA, dtype=torch.float64)
    unique = delta[[0, 1, 2, 3, 4, 8, 9]]
    close(torch.stack([unique.mean(), unique.std()]), [0.0226, 0.2968])
    close(torch.stack([delta.mean(), delta.std()]), [0.0, 0.2488])
    a = row_adv(G2PO(edge_stats="instances"), g2po_batch())
    close(torch.stack([a.mean(), a.std()]), [0.0, 1.0])
    a = row_adv(G2PO(), g2po_batch())[[0, 1, 2, 3, 4, 8, 9]]
    close(torch.stack([a.mean(), a.std()]), [0.0, 1.0])


def test_episode_term_weight():
    batch = g2po_batch()
    for mode, stats in gig.A_EP:
        est = G2PO(w_ep=0.5, episode_mode=mode, stats_over=stats)
        close(row_adv(est, batch), torch.tensor(A_UNIQUE) + 0.5 * torch.tensor(gig.A_EP[mode, stats]))


def test_groups_are_independent():
    twice = g2po_batch(next_anchor=NEXT * 2, episode=gig.EPISODE * 2, traj=gig.TRAJ + [t + 10 for t in gig.TRAJ],
                       step=gig.STEP * 2, anchor=gig.ANCHOR * 2, step_reward=gig.STEP_REWARD * 2,
                       group=[4] * 10 + [1] * 10)
    out = G2PO()(twice)
    close(out.advantages[:, 0], A_UNIQUE * 2)
    assert out.diagnostics["g2po/nodes"] == 10 and out.diagnostics["g2po/edges"] == 14


def test_unvisited_next_state_counts_as_the_sink():
    # τ3 ends in an observation s9 that no step acted in: its value is undefined, so the edge is (s4→⊥).
    truncated = list(NEXT)
    truncated[9] = 9
    close(row_adv(G2PO(), g2po_batch(next_anchor=truncated)), A_UNIQUE)


def test_truncated_end_in_a_visited_state_bootstraps_its_value():
    # τ3's last step leads back to s1 (visited, V 0.95): δ(s4→s1) = 0 + 0.95·0.95 − 0 = 0.9025.
    nxt = list(NEXT)
    nxt[9] = 1
    out = G2PO(edge_stats="instances")(g2po_batch(next_anchor=nxt))
    delta = torch.tensor(DELTA, dtype=torch.float64)
    delta[9] = 0.9025
    close(out.advantages[:, 0], (delta - delta.mean()) / delta.std(), atol=2e-4)


def test_masked_tokens_get_exactly_zero():
    mask = [[1, 1, 1]] * 8 + [[1, 0, 0], [0, 0, 0]]
    adv = G2PO()(g2po_batch(mask=mask)).advantages
    m = torch.tensor(mask)
    assert (adv[m == 0] == 0).all()
    close(adv[:8], torch.tensor(A_UNIQUE[:8])[:, None].expand(8, 3))
    close(adv[8, 0], -1.5966)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("stats", ["unique", "instances"])
def test_all_equal_group_gives_exactly_zero(stats, dtype):
    # Three identical trajectories s0→s1→s2→⊥: every edge's δ is 0 (the values are exactly its returns).
    batch = g2po_batch(next_anchor=[1, 2, -1] * 3, episode=[10.0] * 9, traj=[0, 0, 0, 1, 1, 1, 2, 2, 2],
                       step=[0, 1, 2] * 3, anchor=[0, 1, 2] * 3, step_reward=[0.1, 0.1, 1.0] * 3, dtype=dtype)
    for w_ep in (0.0, 1.0):
        adv = G2PO(edge_stats=stats, w_ep=w_ep)(batch).advantages
        assert adv.dtype == dtype and (adv == 0).all()


def test_single_trajectory_and_single_row():
    # One trajectory s0→s1→s2→⊥ with rewards 0, 0, 1: V = returns, δ = 0 on every edge.
    one = g2po_batch(next_anchor=[1, 2, -1], episode=[1.0] * 3, traj=[0] * 3, step=[0, 1, 2], anchor=[0, 1, 2],
                     step_reward=[0, 0, 1])
    assert (row_adv(G2PO(), one) == 0).all()
    # A state revisited inside one trajectory: s0→s1→s0→⊥, rewards 0, 0, 1 (γ 0.95).
    loop = g2po_batch(next_anchor=[1, 0, -1], episode=[1.0] * 3, traj=[0] * 3, step=[0, 1, 2], anchor=[0, 1, 0],
                      step_reward=[0, 0, 1])
    # V(s0) = (0.9025 + 1)/2 = 0.95125, V(s1) = 0.95: δ = [−0.04875, −0.0463125, 0.04875]; one instance per edge
    delta = torch.tensor([0.95 * 0.95 - 0.95125, 0.95 * 0.95125 - 0.95, 1 - 0.95125], dtype=torch.float64)
    close(row_adv(G2PO(), loop), (delta - delta.mean()) / delta.std())
    lone = g2po_batch(next_anchor=[-1], episode=[0.4], traj=[3], step=[0], anchor=[8], step_reward=[0.4])
    for stats in ("unique", "instances"):
        assert row_adv(G2PO(edge_stats=stats), lone).tolist() == [0.0]
        close(row_adv(G2PO(edge_stats=stats, w_ep=1.0), lone), [0.4])  # GiGPO's singleton episode term


def test_deterministic():
    batch = g2po_batch(perm=torch.tensor([9, 3, 0, 5, 1, 8, 2, 7, 4, 6]))
    a, b = G2PO(w_ep=1.0)(batch), G2PO(w_ep=1.0)(batch)
    assert torch.equal(a.advantages, b.advantages) and a.diagnostics == b.diagnostics


@pytest.mark.parametrize("name", ["traj", "step", "anchor", "next_anchor", "step_reward"])
def test_missing_input_is_named(name):
    batch = g2po_batch()
    del batch.extras[name]
    with pytest.raises(ValueError, match=rf"g2po needs the step-row input '{name}' \[10\].*has none"):
        G2PO()(batch)


@pytest.mark.parametrize("name, value, match", [
    ("next_anchor", torch.tensor([1, 2, -2, 3, 1, 2, -1, 3, 4, -1]), "next_anchor.*−1"),
    ("next_anchor", torch.zeros(10), "dtype torch.float32"),
    ("anchor", torch.tensor([-1] + gig.ANCHOR[1:]), "anchor.*≥ 0"),
    ("step_reward", torch.tensor([float("nan")] + [0.0] * 9), "non-finite"),
])
def test_malformed_input_is_refused(name, value, match):
    batch = g2po_batch()
    batch.extras[name] = value
    with pytest.raises(ValueError, match=match):
        G2PO()(batch)


def test_non_finite_episode_reward_and_inconsistent_steps_are_refused():
    batch = g2po_batch()
    batch.rewards[0, 0] = float("nan")
    with pytest.raises(ValueError, match="g2po: the episode rewards"):
        G2PO()(batch)
    with pytest.raises(ValueError, match="exactly once"):
        G2PO()(g2po_batch(step=[0, 1, 1, 0, 1, 2, 3, 0, 1, 2]))
    with pytest.raises(ValueError, match="spans several groups"):
        G2PO()(g2po_batch(group=[0, 0, 1, 1, 1, 1, 1, 1, 1, 1]))


def test_needs_and_config():
    assert G2PO().needs() == {"traj", "step", "anchor", "next_anchor", "step_reward"} == set(G2PO.requires)
    est = ADVANTAGES.build({"name": "g2po", "edge_stats": "instances", "w_ep": 0.5, "gamma": 0.9})
    assert isinstance(est, G2PO) and est.eps == 1e-6 and est.episode_mode == "mean_norm"
    assert G2PO().gamma == 0.95 and G2PO().edge_stats == "unique" and G2PO().w_ep == 0.0
    for bad in ({"gamma": 1.5}, {"edge_stats": "edges"}, {"w_ep": -1}, {"eps": 0}, {"mode": "mean_norm"}):
        with pytest.raises(ConfigError, match="advantage"):
            ADVANTAGES.build({"name": "g2po", **bad})


# ---- mutation-testing kills


def test_float32_step_rewards_are_read_in_the_episode_rewards_float64():
    batch = g2po_batch()
    batch.extras["step_reward"] = batch.extras["step_reward"].float()  # 0 and 1: exact in float32
    expected = row_adv(G2PO(), g2po_batch())
    torch.testing.assert_close(row_adv(G2PO(), batch), expected, atol=1e-12, rtol=0)


def test_eps_is_added_to_the_std_of_the_td_errors():
    # over the 7 distinct edges mean 0.0226, std_u 0.2968: A = (δ − 0.0226)/(0.2968 + 0.5)
    delta = torch.tensor(DELTA, dtype=torch.float64)
    close(row_adv(G2PO(eps=0.5), g2po_batch()), (delta - 0.0226) / (0.2968 + 0.5), atol=2e-4)


def test_an_unvisited_next_state_merges_with_the_terminal_edge_of_its_anchor():
    # τ2's last step s2 → s9 (never acted in) is the edge s2 → ⊥ that τ1 also takes: still 7 distinct edges
    nxt = list(NEXT)
    nxt[6] = 9
    out = G2PO()(g2po_batch(next_anchor=nxt))
    assert out.diagnostics["g2po/edges"] == 7
    close(out.advantages[:, 0], A_UNIQUE)


def test_a_group_with_one_distinct_edge_gets_zero():
    # s0 → s0 → s0 (a self-loop twice), rewards 0, 1: V(s0) = (0.95 + 1)/2 = 0.975, r_edge = 0.5,
    # δ = 0.5 + 0.95·0.975 − 0.975 = 0.45125 on the one edge: centred on itself (a lone member), A = 0
    batch = g2po_batch(next_anchor=[0, 0], episode=[1.0] * 2, traj=[0, 0], step=[0, 1], anchor=[0, 0],
                       step_reward=[0, 1])
    out = G2PO()(batch)
    assert out.advantages[:, 0].tolist() == [0.0, 0.0]
    close(torch.tensor(out.diagnostics["g2po/td_abs_mean"]), 0.45125)


def test_an_empty_batch_has_no_edges():
    empty = torch.zeros(0, dtype=torch.long)
    batch = g2po_batch(next_anchor=[], episode=[], traj=[], step=[], anchor=[], step_reward=[])
    batch.extras.update(traj=empty, step=empty, anchor=empty, next_anchor=empty)
    batch.group = empty
    out = G2PO()(batch)
    assert out.advantages.shape == (0, 3)
    assert out.diagnostics == {"g2po/nodes": 0.0, "g2po/edges": 0.0, "g2po/td_abs_mean": 0.0}


def test_a_trajectory_across_groups_is_refused_by_name():
    batch = g2po_batch(group=[0] * 9 + [1])  # τ3's last row in another task group
    with pytest.raises(ValueError, match="^advantage g2po: "):
        G2PO()(batch)
