"""OPO (observation policy optimization) on step rows: the spec's opo_siblings example (event selection, sibling
z-scores, token placement; rows shuffled), the redundancy measure, edge cases and input validation."""
import pytest
import torch

from polo.methods.opo_observation.advantage import OPOObservation, jaccard_redundancy, select_events
from polo.core.registry import ADVANTAGES, ConfigError

from .helpers import build_batch, close

# opo_siblings (multi-turn spec §17 d). One task, four full trajectories with outcomes [1, 1, 1, 0]: mean 0.75,
# std_u 0.5, so A^traj = 0.5 for the successes and -1.5 for the failure. Trajectory 0 (two turns) branches at
# its turn 0 (branch id 7, the original has ev = 1); three one-row siblings (traj 10, 11, 12) got ev 0, 0, 1.
# Argument tokens start at response position 2. Sibling rows carry an arbitrary reward: it must not count.
TRAJ = [0, 0, 1, 2, 3, 10, 11, 12]
OUTCOME = [1, 1, 1, 1, 0, 5, -3, 0]
BRANCH = [7, -1, -1, -1, -1, 7, 7, 7]
SIBLING = [0, 0, 0, 0, 0, 1, 1, 1]
EV = [1, 0, 0, 0, 0, 0, 0, 1]
ARG_START = [2] * 8
S = 0.866  # A^sib of ev [1, 0, 0, 1]: ±0.5 / std_u 0.5774
EXPECTED = [[0.5, 0.5, 0.5 + S, 0.5 + S, 0.5 + S],
            [0.5] * 5, [0.5] * 5, [0.5] * 5, [-1.5] * 5,
            [0, 0, -S, -S, -S], [0, 0, -S, -S, -S], [0, 0, S, S, S]]


def opo_batch(outcome=OUTCOME, traj=TRAJ, branch=BRANCH, sibling=SIBLING, ev=EV, arg_start=ARG_START, group=None,
              mask=None, perm=None, dtype=torch.float64):
    N = len(traj)
    mask = torch.ones(N, 5, dtype=torch.long) if mask is None else torch.as_tensor(mask)
    batch = build_batch(outcome, [0] * N if group is None else group, mask=mask)
    batch.rewards = batch.rewards.to(dtype)
    batch.reward_weights = batch.reward_weights.to(dtype)
    batch.extras.update(traj=torch.tensor(traj), branch=torch.tensor(branch), arg_start=torch.tensor(arg_start),
                        sibling=torch.tensor(sibling, dtype=dtype), ev=torch.tensor(ev, dtype=dtype))
    return batch if perm is None else batch.select(perm)


def test_opo_siblings_event_selection():
    u, red = [1.8, 0.6], [0.0, 0.7]
    assert select_events(u, red) == [0]  # priorities [1.8, 0.18]; event 1 fails both thresholds
    assert select_events(u, red, tau_u=0.5, tau_r=0.7, k=2) == [0, 1]
    assert select_events(u, red, k=0) == []


def test_opo_siblings_advantages_in_any_row_order():
    perm = torch.randperm(8, generator=torch.Generator().manual_seed(5))
    for order in (torch.arange(8), perm):
        out = OPOObservation()(opo_batch(perm=order))
        close(out.advantages, torch.tensor(EXPECTED)[order])
        assert out.diagnostics["opo_observation/branch_groups"] == 1.0
        assert out.diagnostics["opo_observation/branch_flat_frac"] == 0.0
        assert out.diagnostics["opo_observation/informative_groups"] == 1.0
        close(torch.tensor(out.diagnostics["opo_observation/sibling_frac"]), 3 / 8)
        close(torch.tensor(out.diagnostics["opo_observation/sib_adv_abs_mean"]), S)


def test_siblings_stay_out_of_the_trajectory_statistics():
    # Whatever the siblings' rewards, the full trajectories' term is that of the four full trajectories alone.
    a = OPOObservation()(opo_batch()).advantages
    b = OPOObservation()(opo_batch(outcome=OUTCOME[:5] + [1, 1, 1])).advantages
    assert torch.equal(a, b)


def test_lam_scales_the_sibling_term_and_zero_keeps_only_the_trajectory_term():
    full = torch.tensor(EXPECTED)
    traj_only = full.clone()
    traj_only[0, 2:] = 0.5
    traj_only[5:] = 0
    close(OPOObservation(lam=0.5)(opo_batch()).advantages, traj_only + 0.5 * (full - traj_only))
    close(OPOObservation(lam=0)(opo_batch()).advantages, traj_only)
    assert OPOObservation(lam=0).needs() == {"traj", "sibling"}
    assert OPOObservation().needs() == {"traj", "branch", "sibling", "ev", "arg_start"}
    batch = opo_batch()
    for name in ("branch", "ev", "arg_start"):
        del batch.extras[name]
    close(OPOObservation(lam=0)(batch).advantages, traj_only)


def test_argument_tokens_follow_arg_start_and_masked_tokens_get_exactly_zero():
    mask = [[1, 1, 1, 1, 0]] + [[1] * 5] * 4 + [[1, 1, 1, 0, 0], [0] * 5, [1] * 5]
    arg_start = [3, 2, 2, 2, 2, 2, 2, 1]
    adv = OPOObservation()(opo_batch(mask=mask, arg_start=arg_start)).advantages
    m = torch.tensor(mask)
    assert (adv[m == 0] == 0).all()
    close(adv[0], [0.5, 0.5, 0.5, 0.5 + S, 0])
    close(adv[5], [0, 0, -S, 0, 0])
    close(adv[7], [0, S, S, S, S])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_all_equal_evidence_and_outcomes_give_exactly_zero(dtype):
    adv = OPOObservation()(opo_batch(outcome=[1.0] * 8, ev=[1.0] * 8, dtype=dtype))
    assert adv.advantages.dtype == dtype and (adv.advantages == 0).all()
    assert adv.diagnostics["opo_observation/branch_flat_frac"] == 1.0
    assert adv.diagnostics["opo_observation/informative_groups"] == 0.0


def test_branch_group_without_siblings_gives_zero_sibling_term():
    # The event row alone in its branch group (its siblings were not sampled): no sibling signal.
    batch = opo_batch(traj=TRAJ[:5], outcome=OUTCOME[:5], branch=BRANCH[:5], sibling=SIBLING[:5], ev=EV[:5],
                      arg_start=ARG_START[:5])
    close(OPOObservation()(batch).advantages, [[0.5] * 5] * 4 + [[-1.5] * 5])


def test_single_full_trajectory_and_two_tasks():
    # Task 4: one full trajectory (mean 0, std 1: A^traj = R) with a branch of one sibling; task 1: the example.
    batch = opo_batch(outcome=[0.3, 0.0] + OUTCOME, traj=[20, 21] + TRAJ, branch=[3, 3] + BRANCH,
                      sibling=[0, 1] + SIBLING, ev=[0, 1] + EV, arg_start=[0, 0] + ARG_START,
                      group=[4, 4] + [1] * 8)
    a = OPOObservation()(batch)
    s2 = 0.5 / (0.5 ** 0.5)  # ev [0, 1]: ±0.5 / std_u 0.7071
    close(a.advantages[:2], [[0.3 - s2] * 5, [s2] * 5])
    close(a.advantages[2:], EXPECTED)
    assert a.diagnostics["opo_observation/branch_groups"] == 2.0


def test_deterministic():
    batch = opo_batch(perm=torch.tensor([7, 2, 5, 0, 6, 1, 4, 3]))
    a, b = OPOObservation()(batch), OPOObservation()(batch)
    assert torch.equal(a.advantages, b.advantages) and a.diagnostics == b.diagnostics


def test_jaccard_redundancy():
    args = ["Temi river", "temi  river!", "river delta", "Nile", ""]
    # identical after normalization → 1.0; {river, delta} vs {temi, river} → 1/3; no overlap → 0.
    close(torch.tensor(jaccard_redundancy(args)), [0.0, 1.0, 1 / 3, 0.0, 0.0])
    assert jaccard_redundancy([]) == [] and jaccard_redundancy(["a_b", "b-a"]) == [0.0, 1.0]
    assert jaccard_redundancy(["", "..."]) == [0.0, 1.0]  # two empty token sets are the same argument


def test_redundancy_feeds_event_selection():
    red = jaccard_redundancy(["temi", "temi", "nile"])
    assert select_events([1.5, 2.0, 1.2], red, k=3) == [0, 2]  # event 1 repeats event 0: redundancy 1
    assert select_events([1.5, 1.5], [0.0, 0.0], k=2) == [0, 1]  # ties: the earlier first


@pytest.mark.parametrize("args, match", [(([1.0], [0.0, 0.0]), "1 uncertainties but 2"),
                                         (([float("nan")], [0.0]), "finite"), (([1.0], [0.0], 1.0, 0.5, -1), "k")])
def test_select_events_refuses_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        select_events(*args)


@pytest.mark.parametrize("name", ["traj", "branch", "sibling", "ev", "arg_start"])
def test_missing_input_is_named(name):
    batch = opo_batch()
    del batch.extras[name]
    with pytest.raises(ValueError, match=rf"opo_observation needs the step-row input '{name}' \[8\].*has none"):
        OPOObservation()(batch)


@pytest.mark.parametrize("changes, match", [
    ({"ev": [float("nan")] + EV[1:]}, "non-finite"),
    ({"sibling": [0.5] + SIBLING[1:]}, "0.0 or 1.0"),
    ({"branch": BRANCH[:5] + [-1, 7, 7]}, "must carry the branch id"),
    ({"branch": [-2] + BRANCH[1:]}, "≥ 0, or -1"),
    ({"branch": [-1] + BRANCH[1:]}, "exactly one original"),
    ({"branch": [7, 7] + BRANCH[2:]}, "exactly one original"),
    ({"traj": TRAJ[:5] + [10, 10, 12]}, "traj id of its own"),
    ({"traj": TRAJ[:5] + [1, 11, 12]}, "traj id of its own"),
    ({"group": [0] * 7 + [1]}, "branch group spans several task groups"),
    ({"arg_start": [-1] + ARG_START[1:]}, "arg_start"),
])
def test_malformed_input_is_refused(changes, match):
    with pytest.raises(ValueError, match=match):
        OPOObservation()(opo_batch(**changes))


def test_wrong_dtypes_and_non_finite_rewards_are_refused():
    batch = opo_batch()
    batch.extras["branch"] = batch.extras["branch"].double()
    with pytest.raises(ValueError, match="'branch'.*dtype torch.float64"):
        OPOObservation()(batch)
    batch = opo_batch()
    batch.rewards[2, 0] = float("inf")
    with pytest.raises(ValueError, match="episode rewards"):
        OPOObservation()(batch)
    with pytest.raises(ValueError, match="spans several groups"):
        OPOObservation()(opo_batch(group=[0, 1] + [0] * 6))


def test_config_fields_are_validated():
    est = ADVANTAGES.build({"name": "opo_observation", "lam": 2.0})
    assert isinstance(est, OPOObservation) and est.eps == 1e-6 and OPOObservation().lam == 1.0
    assert ADVANTAGES.get("opo") is not OPOObservation  # "opo" is the unrelated optimal-baseline estimator
    for bad in ({"lam": -1}, {"eps": 0}, {"tau_u": 1.0}):
        with pytest.raises(ConfigError, match="advantage"):
            ADVANTAGES.build({"name": "opo_observation", **bad})
