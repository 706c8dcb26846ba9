"""ReflectPO on step rows of rollout trees: the reflectpo_tree example (any row order), the error rules each
triggering the recovery gain, the leaf-return option, chain and single-trajectory edge cases, validation."""
import pytest
import torch

from polo.methods.reflectpo.advantage import ReflectPO
from polo.core.registry import ADVANTAGES

from .helpers import build_batch, close

# reflectpo_tree: root r -> A (traj 0, step 0); A -> B (traj 0 step 1, back in state r: a repeated visit);
# B -> D (traj 0 step 2, R 0); A -> C (branch traj 1 from step 1, R 1); B -> E (branch traj 2 from step 2, R 1).
TREE = dict(traj=[0, 0, 0, 1, 2], step=[0, 1, 2, 1, 2], parent=[-1, -1, -1, 0, 0], anchor=[0, 1, 0, 1, 0],
            next_anchor=[1, 0, -1, -1, -1], reward=[0, 0, 0, 1, 1])
TREE_A = [0.0, -0.1667, -0.5, 0.3333, 0.75]


def tree_batch(traj, step, parent, anchor, next_anchor, reward, valid=None, tool_error=None, group=None,
               mask=None, perm=None, dtype=torch.float64):
    N = len(traj)
    mask = torch.ones(N, 3, dtype=torch.long) if mask is None else torch.as_tensor(mask)
    batch = build_batch(reward, [0] * N if group is None else group, mask=mask)
    batch.rewards = batch.rewards.to(dtype)
    batch.reward_weights = batch.reward_weights.to(dtype)
    ids = dict(dtype=torch.long)
    batch.parent = torch.tensor(parent, **ids)
    batch.extras.update(traj=torch.tensor(traj, **ids), step=torch.tensor(step, **ids),
                        anchor=torch.tensor(anchor, **ids), next_anchor=torch.tensor(next_anchor, **ids),
                        valid=torch.tensor([1.0] * N if valid is None else valid, dtype=dtype),
                        tool_error=torch.tensor([0.0] * N if tool_error is None else tool_error, dtype=dtype))
    return batch if perm is None else batch.select(perm)


def row_adv(est, batch):
    return est(batch).advantages[:, 0]


def test_reflectpo_tree_example_in_any_row_order():
    for seed in (None, 1, 2, 3):
        order = torch.arange(5) if seed is None else torch.randperm(5, generator=torch.Generator().manual_seed(seed))
        out = ReflectPO()(tree_batch(**TREE, perm=order))
        close(out.advantages[:, 0], torch.tensor(TREE_A)[order])
        close(out.advantages, torch.tensor(TREE_A)[order][:, None].expand(5, 3))
    # parent nodes: r (not flagged), A (not flagged), B (flagged) -> 1/3; 3 leaves in the one tree
    close(torch.tensor(out.diagnostics["reflectpo/err_frac"]), 1 / 3)
    assert out.diagnostics["reflectpo/tree_leaves_mean"] == 3


def test_registered_with_defaults_and_float32():
    est = ADVANTAGES.build("reflectpo")
    assert isinstance(est, ReflectPO) and (est.eta, est.delta_err, est.w_o) == (0.5, 0.5, 0.0)
    assert est.needs() == {"traj", "step", "anchor", "next_anchor", "valid", "tool_error"}
    close(row_adv(est, tree_batch(**TREE, dtype=torch.float32)), TREE_A)
    assert est.provenance == "RECONSTRUCTED" and "arXiv id not found" in est.paper


def test_eta_scales_only_the_recovery_gain():
    close(row_adv(ReflectPO(eta=0), tree_batch(**TREE)), [0.0, -0.1667, -0.5, 0.3333, 0.5])
    close(row_adv(ReflectPO(eta=2), tree_batch(**TREE)), [0.0, -0.1667, -0.5, 0.3333, 1.5])


def test_repeated_visit_alone_flags_b():
    # delta_err beyond any gap switches rule (iii) off: B is still erroneous by its repeated visit.
    close(row_adv(ReflectPO(delta_err=5), tree_batch(**TREE)), TREE_A)
    # Without the repeated visit (B's state is new) and with (iii) off, B→E gets no recovery gain.
    fresh = dict(TREE, anchor=[0, 1, 2, 1, 2], next_anchor=[1, 2, -1, -1, -1])
    close(row_adv(ReflectPO(delta_err=5), tree_batch(**fresh)), [0.0, -0.1667, -0.5, 0.3333, 0.5])
    # ...but the sibling C (value 1) exceeds B (0.5) by 0.5 >= delta_err 0.5: rule (iii) flags B.
    close(row_adv(ReflectPO(), tree_batch(**fresh)), TREE_A)


# A small tree for the invalid-action and sibling rules: two root episodes and one branch.
# traj 0: r -s0-> X (step 0, anchor 0 -> 1) -s1-> leaf (step 1, anchor 1 -> -1), R 0
# traj 1: branch of 0 from step 1: X -> leaf (anchor 1 -> -1), R 1
# traj 2: r -> Y (step 0, anchor 0 -> 2) -> leaf (step 1, anchor 2 -> -1), R 1
SMALL = dict(traj=[0, 0, 1, 2, 2], step=[0, 1, 1, 0, 1], parent=[-1, -1, 0, -1, -1], anchor=[0, 1, 1, 0, 2],
             next_anchor=[1, -1, -1, 2, -1], reward=[0, 0, 1, 1, 1])
# V: r = 2/3, X = 0.5, Y = 1, leaves 0, 1, 1. D: r→X −1/6, X→0 −0.5, X→1 0.5, r→Y 1/3, Y→leaf 0.
SMALL_D = [-1 / 6, -0.5, 0.5, 1 / 3, 0.0]


def test_invalid_action_flag_triggers_recovery_gain():
    est = ReflectPO(delta_err=5)  # rule (iii) off
    close(row_adv(est, tree_batch(**SMALL)), SMALL_D)  # X is not erroneous
    invalid = row_adv(est, tree_batch(**SMALL, valid=[0, 1, 1, 1, 1]))  # the action into X failed to parse
    close(invalid, [-1 / 6, -0.5, 0.75, 1 / 3, 0.0])
    tool = row_adv(est, tree_batch(**SMALL, tool_error=[1, 0, 0, 0, 0]))
    close(tool, invalid)
    # a flag on a leaf's incoming action changes nothing (a leaf is nobody's parent)
    close(row_adv(est, tree_batch(**SMALL, valid=[1, 0, 0, 1, 0])), SMALL_D)


def test_sibling_value_flag_triggers_recovery_gain():
    # Y (1) exceeds its sibling X (0.5) by 0.5 >= delta_err: X is erroneous, X's better child gets 0.5·0.5.
    close(row_adv(ReflectPO(), tree_batch(**SMALL)), [-1 / 6, -0.5, 0.75, 1 / 3, 0.0])
    close(row_adv(ReflectPO(delta_err=0.6), tree_batch(**SMALL)), SMALL_D)
    out = ReflectPO()(tree_batch(**SMALL))
    close(torch.tensor(out.diagnostics["reflectpo/err_frac"]), 1 / 3)  # parents r, X (flagged), Y
    close(torch.tensor(out.diagnostics["reflectpo/tree_leaves_mean"]), 3.0)


def test_negative_credit_gets_no_recovery_gain():
    # X erroneous; its worse child (D = −0.5) keeps plain D.
    a = row_adv(ReflectPO(eta=3), tree_batch(**SMALL, valid=[0, 1, 1, 1, 1]))
    close(a, [-1 / 6, -0.5, 0.5 + 1.5, 1 / 3, 0.0])


def test_nested_branch_inherits_nodes_through_two_levels():
    # traj 0: r->P0->P1->P2 (R 0); traj 1 branches from 0 at step 1 (owns steps 1..2, R 0);
    # traj 2 branches from 1 at step 2 (copied: steps 0 of traj 0, step 1 of traj 1; R 1).
    b = dict(traj=[0, 0, 0, 1, 1, 2], step=[0, 1, 2, 1, 2, 2], parent=[-1, -1, -1, 0, 0, 1],
             anchor=[0, 1, 2, 1, 3, 3], next_anchor=[1, 2, -1, 3, -1, -1], reward=[0, 0, 0, 0, 0, 1])
    # V: r = P0 = 1/3; P1 = 0; traj1 step1 node Q1 = 0.5; leaves 0, 0, 1.
    # D: r→P0 0, P0→P1 −1/3, P1→P2 0, P0→Q1 1/6, Q1→Q2 −0.5, Q1→leaf 0.5 (Q1 not erroneous with (iii) off)
    expected = [0.0, -1 / 3, 0.0, 1 / 6, -0.5, 0.5]
    close(row_adv(ReflectPO(delta_err=5), tree_batch(**b)), expected)
    perm = torch.tensor([5, 3, 0, 4, 2, 1])
    close(row_adv(ReflectPO(delta_err=5), tree_batch(**b, perm=perm)), torch.tensor(expected)[perm])
    # default delta_err: Q1 (0.5) exceeds P1 (0) by 0.5 -> P1 flagged, but P1→P2 has D = 0; nothing changes
    # except where the parent is flagged and D > 0: none here.
    close(row_adv(ReflectPO(), tree_batch(**b)), expected)


def test_chains_without_branches_equal_rewards_give_zero():
    chain = dict(traj=[0, 0, 1, 1, 1, 2], step=[0, 1, 0, 1, 2, 0], parent=[-1] * 6, anchor=[0, 1, 0, 2, 0, 0],
                 next_anchor=[1, -1, 2, 0, -1, -1], reward=[1] * 6)
    out = ReflectPO(w_o=1.0)(tree_batch(**chain, valid=[0, 1, 1, 1, 1, 1]))
    assert torch.equal(out.advantages, torch.zeros(6, 3, dtype=torch.float64))
    # unequal rewards: the first turn gets R_i − mean_g R, later turns 0
    unequal = dict(chain, reward=[1, 1, 0, 0, 0, 0.5])
    close(row_adv(ReflectPO(delta_err=5), tree_batch(**unequal)), [0.5, 0, -0.5, 0, 0, 0])


def test_single_root_trajectory_gives_zero():
    one = dict(traj=[7, 7, 7], step=[2, 0, 1], parent=[-1] * 3, anchor=[0, 1, 0], next_anchor=[-1, 0, 1],
               reward=[3.0] * 3)
    out = ReflectPO(w_o=2.0)(tree_batch(**one, valid=[0, 0, 1]))
    assert torch.equal(out.advantages, torch.zeros(3, 3, dtype=torch.float64))


def test_empty_batch():
    empty = {k: [] for k in TREE}
    out = ReflectPO()(tree_batch(**empty, mask=torch.zeros(0, 3, dtype=torch.long)))
    assert out.advantages.shape == (0, 3)


def test_leaf_return_option():
    # leaves 0, 1, 1: mean 2/3, std_u 0.5774 -> z = −1.1547, 0.5774, 0.5774 on every row of the trajectory
    z = torch.tensor([-1.1547, -1.1547, -1.1547, 0.5774, 0.5774])
    close(row_adv(ReflectPO(w_o=0.5), tree_batch(**TREE)), torch.tensor(TREE_A) + 0.5 * z)


def test_masked_tokens_are_exactly_zero():
    mask = [[1, 1, 0], [0, 0, 0], [1, 0, 1], [1, 1, 1], [0, 1, 0]]
    out = ReflectPO(w_o=1.0)(tree_batch(**TREE, mask=mask)).advantages
    m = torch.tensor(mask, dtype=torch.bool)
    assert torch.all(out[~m] == 0)
    z = torch.tensor([-1.1547, -1.1547, -1.1547, 0.5774, 0.5774])
    close(out[m], (torch.tensor(TREE_A) + z)[:, None].expand(5, 3)[m])


def test_groups_are_independent_and_deterministic():
    shifted = {k: v + [x + 10 if k == "traj" or (k == "parent" and x >= 0) else x for x in v]
               for k, v in TREE.items()}
    batch = tree_batch(**shifted, group=[3] * 5 + [1] * 5)
    out = ReflectPO()(batch)
    close(out.advantages[:, 0], TREE_A * 2)
    assert out.diagnostics["reflectpo/tree_leaves_mean"] == 3
    assert torch.equal(out.advantages, ReflectPO()(batch).advantages)


@pytest.mark.parametrize("change, match", [
    (dict(reward=[0, 0, float("nan"), 1, 1]), "non-finite"),
    (dict(parent=[-1, -1, -1, 5, 0]), "parent"),
    (dict(parent=[-1, -1, -1, 0, 2]), "own parent"),
    (dict(parent=[-1, 0, -1, 0, 0]), "equal on every row"),
    (dict(parent=[-1, -1, -1, 2, 1]), "cycle"),
    (dict(step=[0, 1, 2, 1, 4]), "parent chain does not have"),
    (dict(step=[1, 2, 3, 1, 2]), "root trajectory"),
    (dict(step=[0, 1, 1, 1, 2]), "step"),
])
def test_bad_inputs_are_refused(change, match):
    with pytest.raises(ValueError, match=match):
        ReflectPO()(tree_batch(**{**TREE, **change}))


def test_bad_input_types_are_refused():
    batch = tree_batch(**TREE)
    batch.parent = batch.parent.double()
    with pytest.raises(ValueError, match="batch.parent"):
        ReflectPO()(batch)
    with pytest.raises(ValueError, match="valid"):
        ReflectPO()(tree_batch(**TREE, valid=[1, 0.5, 1, 1, 1]))
    with pytest.raises(ValueError, match="another task group"):
        ReflectPO()(tree_batch(**TREE, group=[0, 0, 0, 1, 0]))
    batch = tree_batch(**TREE)
    del batch.extras["next_anchor"]
    with pytest.raises(ValueError, match="next_anchor"):
        ReflectPO()(batch)
