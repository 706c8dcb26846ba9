"""DiDPO on step rows: the spec's didpo_basic example (GS, A^D in both modes, the four token rows, in any row
order), the groupability score's forms, and the edge cases (no anchors, singletons, masked tokens, all-equal
returns, gs_min, NaN inputs, bad settings)."""
import math

import pytest
import torch

from polo.methods.didpo.advantage import DiDPO, groupability_score
from polo.core.registry import ADVANTAGES

from .helpers import build_batch, close

# didpo_basic: one task, 4 step rows (each its own one-turn trajectory, so G = step reward), episode outcomes
# [1, 0, 1, 0]. Anchor X (2 lines) in rows 0, 1, 2; anchor Y (1 line) in rows 0, 3.
G = [1.0, 0.0, 0.9025, 0.0]
OUTCOME = [1.0, 0.0, 1.0, 0.0]
LENGTHS = [10, 6, 6, 5]
X, Y = 1, 2
SLOTS = {  # row: [(anchor, lines, token span)]
    0: [(X, 2, (2, 5)), (Y, 1, (6, 8))],
    1: [(X, 2, (0, 3))],
    2: [(X, 2, (1, 4))],
    3: [(Y, 1, (0, 2))],
}
ROWS = [
    [0.5, 0.5, 0.8658, 0.8658, 0.8658, 0.5, 1.0, 1.0, 0.5, 0.5],
    [-1.1342] * 3 + [-0.5] * 3 + [0] * 4,
    [0.5] + [0.7683] * 3 + [0.5, 0.5] + [0] * 4,
    [-1.0, -1.0, -0.5, -0.5, -0.5] + [0] * 5,
]


def diff_batch(slots=SLOTS, outcome=OUTCOME, returns=G, lengths=LENGTHS, group=None, width=10, dtype=torch.float64):
    N = len(outcome)
    mask = (torch.arange(width)[None] < torch.tensor(lengths)[:, None]).long()
    batch = build_batch(outcome, [0] * N if group is None else group, mask=mask)
    batch.rewards, batch.reward_weights = batch.rewards.to(dtype), batch.reward_weights.to(dtype)
    K = max([len(v) for v in slots.values()], default=0)
    anchor, lines, span = torch.zeros(N, K, dtype=torch.long), torch.zeros(N, K), torch.zeros(N, K, 2, dtype=torch.long)
    for row, occ in slots.items():
        for k, (a, n_lines, (s, e)) in enumerate(occ):
            anchor[row, k], lines[row, k], span[row, k] = a, n_lines, torch.tensor([s, e])
    batch.extras.update(traj=torch.arange(N), step=torch.zeros(N, dtype=torch.long),
                        step_reward=torch.tensor(returns, dtype=dtype), diff_anchor=anchor, diff_lines=lines,
                        diff_span=span)
    return batch


def test_groupability_scores_of_the_example():
    gs = groupability_score(torch.tensor([2.0, 1.0]), torch.tensor([3, 2]))
    close(gs, [0.2212 * 0.2212, 0.1175 * 0.1175])
    close(gs, [0.0489, 0.0138])
    close(groupability_score(torch.tensor([2.0]), torch.tensor([1])), [0.0])  # a singleton scores 0


def test_groupability_forms():
    s, n = torch.tensor([2.0, 20.0]), torch.tensor([3, 20])
    close(groupability_score(s, n, "log"), [math.log1p(2) / math.log1p(8) * math.log(3) / math.log(8), 1.0])
    close(groupability_score(s, n, "linear"), [0.25 * 2 / 7, 1.0])
    with pytest.raises(ValueError, match="unknown form 'cubic'"):
        groupability_score(s, n, "cubic")
    with pytest.raises(ValueError, match="g0 > 1"):
        groupability_score(s, n, "linear", g0=1.0)


@pytest.mark.parametrize("perm", [None, [2, 0, 3, 1]])
def test_didpo_basic_token_rows_in_any_row_order(perm):
    batch = diff_batch()
    order = torch.arange(4) if perm is None else torch.tensor(perm)
    out = DiDPO()(batch.select(order))
    close(out.advantages, torch.tensor(ROWS)[order])
    episode = DiDPO(snippet_advantage_w=0)(batch.select(order)).advantages
    close(episode[:, 0], torch.tensor([0.5, -0.5, 0.5, -0.5])[order])
    d = out.diagnostics
    assert d["didpo/anchors"] == 2 and d["didpo/anchors_per_uid"] == 2
    close(torch.tensor(d["didpo/gs_mean"]), (0.0489 + 0.0138) / 2)
    close(torch.tensor(d["didpo/covered_token_frac"]), (5 + 3 + 3 + 2) / 27)
    close(torch.tensor(d["didpo/anchor_support_mean"]), 2.5)


def test_didpo_basic_diff_advantages_both_modes():
    # A^D read off one covered token per occurrence: (A - A^E) / λ.
    batch = diff_batch()
    a_ep = torch.tensor([0.5, -0.5, 0.5, -0.5])
    picks = [(0, 2), (1, 0), (2, 1), (0, 6), (3, 0)]  # X in rows 0, 1, 2; Y in rows 0, 3
    rows, cols = (torch.tensor(x) for x in zip(*picks))
    mean = DiDPO(snippet_advantage_w=0.5)(batch).advantages
    close((mean[rows, cols] - a_ep[rows]) / 0.5, [0.3658, -0.6342, 0.2683, 0.5, -0.5])
    std = DiDPO(mode="mean_std_norm")(batch)
    a_ep_std = DiDPO(mode="mean_std_norm", snippet_advantage_w=0)(batch).advantages[:, 0]
    # episode: mean 0.5, std_u 0.5774; X: std_p 0.4502; Y: {1, 0} std_p 0.5
    close(a_ep_std, [0.8660, -0.8660, 0.8660, -0.8660])
    close(std.advantages[rows, cols] - a_ep_std[rows], [0.8126, -1.4087, 0.5960, 1.0, -1.0])


def test_no_anchors_gives_the_episode_advantage():
    batch = diff_batch(slots={})
    out = DiDPO()(batch)
    close(out.advantages, DiDPO(snippet_advantage_w=0)(batch).advantages)
    assert out.diagnostics["didpo/anchors"] == 0 and out.diagnostics["didpo/covered_token_frac"] == 0


def test_singleton_anchor_and_gs_min_are_ignored():
    episode = DiDPO(snippet_advantage_w=0)(diff_batch()).advantages
    lone = diff_batch(slots={0: [(X, 2, (2, 5))]})
    close(DiDPO()(lone).advantages, episode)  # GS(n=1) = 0 ≤ gs_min = 0
    only_x = {r: [o for o in occ if o[0] == X] for r, occ in SLOTS.items()}
    close(DiDPO(gs_min=0.02)(diff_batch()).advantages, DiDPO()(diff_batch(slots=only_x)).advantages)


def test_higher_gs_wins_overlapping_tokens():
    # Y now overlaps X in row 0 on token 4: X (GS 0.0489) keeps it.
    slots = {**SLOTS, 0: [(Y, 1, (4, 8)), (X, 2, (2, 5))]}
    adv = DiDPO()(diff_batch(slots=slots)).advantages
    close(adv[0], [0.5, 0.5, 0.8658, 0.8658, 0.8658, 1.0, 1.0, 1.0, 0.5, 0.5])


@pytest.mark.parametrize("x_lines, z_lines, row0", [(2, 1, 0.8658), (1, 2, 1.1667)])
def test_the_size_term_decides_between_anchors_of_equal_support(x_lines, z_lines, row0):
    # X in rows 0-2 and Z in rows 0, 1, 3 (support 3 each) overlap on row 0's tokens 2-4: the anchor of more
    # changed lines has the larger GS and gives those tokens its A^D (X: 1 - 0.634, Z: 1 - 0.333), plus A^E 0.5.
    # CodeFix-v0 never shows this (every sub-diff there is one body line: phi(s) is constant).
    Z = 3
    slots = {0: [(X, x_lines, (2, 5)), (Z, z_lines, (2, 5))], 1: [(X, x_lines, (0, 3)), (Z, z_lines, (3, 5))],
             2: [(X, x_lines, (1, 4))], 3: [(Z, z_lines, (0, 2))]}
    out = DiDPO()(diff_batch(slots=slots))
    close(out.advantages[0, 2:5], [row0] * 3)
    assert out.diagnostics["didpo/anchor_lines_mean"] == 1.5


def test_masked_tokens_stay_zero():
    lengths = [3, 6, 6, 5]  # row 0 ends inside X's span; Y's span lies wholly in its padding
    adv = DiDPO()(diff_batch(lengths=lengths)).advantages
    close(adv[0], [0.5, 0.5, 0.8658] + [0] * 7)
    close(adv[1:], torch.tensor(ROWS[1:]))


def test_all_equal_returns_give_no_diff_term():
    batch = diff_batch(returns=[0.5] * 4)
    close(DiDPO()(batch).advantages, DiDPO(snippet_advantage_w=0)(batch).advantages)
    close(DiDPO(mode="mean_std_norm")(batch).advantages,
          DiDPO(mode="mean_std_norm", snippet_advantage_w=0)(batch).advantages)


def test_groups_are_independent():
    # The example twice as two tasks: equal anchor ids in different tasks never meet.
    slots = {**SLOTS, **{r + 4: occ for r, occ in SLOTS.items()}}
    batch = diff_batch(slots=slots, outcome=OUTCOME * 2, returns=G * 2, lengths=LENGTHS * 2, group=[3] * 4 + [0] * 4)
    out = DiDPO()(batch)
    close(out.advantages, torch.tensor(ROWS * 2))
    assert out.diagnostics["didpo/anchors"] == 4 and out.diagnostics["didpo/anchors_per_uid"] == 2


def test_float32_batch():
    close(DiDPO()(diff_batch(dtype=torch.float32)).advantages, torch.tensor(ROWS))


def test_bad_inputs_are_named():
    batch = diff_batch()
    batch.extras["step_reward"] = torch.tensor([1.0, float("nan"), 0, 0], dtype=torch.float64)
    with pytest.raises(ValueError, match="step_reward.*non-finite"):
        DiDPO()(batch)
    batch = diff_batch()
    batch.rewards[1, 0] = float("nan")
    with pytest.raises(ValueError, match="episode rewards"):
        DiDPO()(batch)
    batch = diff_batch()
    del batch.extras["diff_span"]
    with pytest.raises(ValueError, match="'diff_span'.*diff_anchor provider"):
        DiDPO()(batch)
    batch = diff_batch()
    batch.extras["diff_anchor"] = batch.extras["diff_anchor"].float()
    with pytest.raises(ValueError, match="'diff_anchor'.*integer dtype"):
        DiDPO()(batch)
    batch = diff_batch()
    batch.extras["diff_lines"][0, 0] = -1
    with pytest.raises(ValueError, match="'diff_lines'.*negative"):
        DiDPO()(batch)
    DiDPO(snippet_advantage_w=0)(batch)  # the episode term alone reads none of them
    assert DiDPO(snippet_advantage_w=0).needs() == set()


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="overhead_mode"):
        ADVANTAGES.build({"name": "didpo", "overhead_mode": "fast"})
    with pytest.raises(ValueError, match="g0=1.0 with gs_form linear"):
        DiDPO(gs_form="linear", g0=1.0)
    with pytest.raises(ValueError, match="sim_thresh"):
        DiDPO(sim_thresh=1.5)
