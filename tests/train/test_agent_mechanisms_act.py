"""OPO, BiPACE, APPO and DiDPO act at their shipped settings in a short run on the built-in model (#35).

Each run: the recipe as shipped under the ``tiny`` fixture (the built-in model shrunk, 40 warm-start steps),
``seed=0``, two steps. Each check reads the diagnostic that shows the method's own mechanism,
per step; values seen with seed 0 (torch 2.13, CPU) are in the comments. bench/agents_acting.py measures the
same at the shipped model size over 6 steps.
"""

from polo.train.config import load_recipe
from polo.train.trainer import Trainer


EXTRA = {name: ["warm_start.steps=300"] for name in ("opo_observation", "bipace", "didpo")}
"""After the fixture's 40 warm-start steps the tiny model searches no gold fact (OPO: every sibling's evidence is
0), reaches no goal (BiPACE: every return is 0) and writes no edit (DiDPO: no sub-diff); after 300 it does."""


def run(name, tiny, tmp_path):
    overrides = [*tiny, "seed=0", "train.steps=2", *EXTRA.get(name, [])]
    rows = Trainer(load_recipe(name, overrides), tmp_path, log=lambda *_: None).run()
    return [row for row in rows if row["step"] > 0]


def test_opo_branches_events_whose_siblings_differ_in_evidence(tiny, tmp_path):
    rows = run("opo_observation", tiny, tmp_path)
    # branch groups whose siblings' evidence differs: a nonzero sibling advantage on argument tokens
    assert sum(r["opo_observation/informative_groups"] for r in rows) >= 2, rows  # 14 and 11 groups
    assert all(r["opo_observation/sib_adv_abs_mean"] > 0 for r in rows), rows


def test_bipace_clusters_follow_states_within_a_task(tiny, tmp_path):
    for r in run("bipace", tiny, tmp_path):
        assert r["bipace/clusters_per_task"] > 1.0, r  # 3.75 at step 1; raw hidden states: 1.0
        assert r["bipace/return_var_ratio"] < 1.0, r  # 1.0 with one cluster a task; 0.963 at step 1


def test_appo_score_picks_uncertain_tokens_from_the_first_step(tiny, tmp_path):
    # The policy is its reference at step 1 (and the tiny model, solving no episode, is not updated after it):
    # entropy alone picks the branch token, and the scale stays 1. The gain term is tested on constructed
    # log-ratios (tests/core/test_advantages_appo.py) and measured at the shipped size by bench/agents_acting.py.
    for r in run("appo", tiny, tmp_path):
        assert r["appo/branch_entropy_ratio"] > 1.0, r  # 1.116 at step 2
        assert r["appo/branch_scale_mean"] == 1.0, r


def test_didpo_credits_recurring_sub_diffs(tiny, tmp_path):
    rows = run("didpo", tiny, tmp_path)
    assert sum(r["didpo/anchors"] for r in rows) > 0, rows  # 11 and 12 anchors
    assert sum(r["didpo/diff_adv_abs_mean"] for r in rows) > 0, rows  # 0.110 and 0.138
