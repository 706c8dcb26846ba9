"""Every shipped recipe's off-policy mechanism acts in a short run on the built-in model.

A recipe that does one update per rollout batch trains exactly on-policy: the importance ratio is 1, so
clipping, trust regions, ESS caps and ratio penalties never act (the old recipes measured clip fraction 0,
ESS 1.0, KL to the old policy 0). With the shipped ``train.epochs`` × ``train.minibatches`` the later
updates of a batch are off-policy, and each recipe's mechanism must show in its metrics rows.

``MECHANISMS`` names, per recipe, the metric that proves *its* mechanism acts, the condition on its mean
over the run's steps (steps whose rows carry the metric: rows whose advantages are all 0 skip the update),
and why that metric is the right one. ``EXEMPT`` lists the recipes that stay on-policy by design, with the
reason; their test asserts that they do (ratio exactly 1), so no recipe is skipped silently.

Every run: the ``tiny`` fixture (3 steps on the built-in model), ``seed=0``, at least as many prompts per
step as the recipe has minibatches (a minibatch is made of whole groups), and ``optim.lr=5e-3`` (10× the
shipped 5e-4): the mechanisms respond to how far the policy drifts between the updates of one batch, and at
5e-4 the tiny model moves so little in 3 steps that several clip-type recipes count no clipped token at all
(info_ppo and grpo_passk with seeds 0-2, oblr_po with seeds 0 and 2). The update counts are the shipped ones.
Values seen with seed 0 (torch 2.13, CPU, one thread) are in each entry's comment. Only the public
``load_recipe`` / ``Trainer(...).run()`` API and metric names are used.
"""
import math
import operator

import pytest

from conftest import recipe_extras
from polo.train.config import RECIPES_DIR, load_recipe
from polo.train.trainer import Trainer

CLIP = ("policy/clip_frac_low", "policy/clip_frac_high")
ESS = ("policy/ratio_ess",)
CLIP_WHY = "fraction of trained tokens whose PPO ratio left [1-eps_low, 1+eps_high] (0 when on-policy)"

# recipe -> (metric: keys summed per step, condition on the mean over steps, why that metric)
MECHANISMS = {
    "cispo": (ESS, ("<", 0.99),  # 0.861
              "the detached IS weight min(r, eps_max) reweights tokens only where r != 1; normalized ESS of the "
              "ratios < 1 shows non-uniform weights (the eps_max = 5 truncation itself is rare at this size)"),
    "clip_cov": (CLIP, (">", 0.005), "PPO clip of Clip-Cov: " + CLIP_WHY),  # 0.156
    "cort": (CLIP, (">", 0.005), CLIP_WHY + " (advantages reweighted by the rubric contrast, warming up)"),  # 0.186
    "ctpo": (CLIP + ("policy/clip_frac_dual",), (">", 0.05),  # 0.512
             "fraction of tokens whose cumulative-token ratio left the sqrt(position) log-space window, or hit "
             "the dual clip"),
    "dapo": (CLIP, (">", 0.005), "clip-higher 0.2/0.28: " + CLIP_WHY),  # 0.258
    "dagrpo": (CLIP, (">", 0.005), CLIP_WHY + " (pairwise advantages over distinct digit_match scores)"),  # 0.134
    "dapo_lite": (CLIP, (">", 0.005), "clip-higher 0.2/0.28: " + CLIP_WHY),  # 0.245
    "dgpo": (CLIP, (">", 0.005), "PPO clip on the redistributed token advantages: " + CLIP_WHY),  # 0.150
    "dr_grpo": (CLIP, (">", 0.005), CLIP_WHY),  # 0.214
    "dro": (("policy/log_ratio_sq",), (">", 1e-3),  # 0.219
            "the quadratic penalty beta/2 (log pi/pi_old)^2 is 0 on-policy; its mean square log-ratio > 0 shows "
            "it pulls the later updates back"),
    "drpo": (("policy/trust_region_multiplier",), (">", 1.0),  # 327.2
             "trust region to pi_old: the multiplier sg(max(beta (KL - delta), 0)) is 0 on-policy and > 0 once "
             "KL(old||new) > delta"),
    "gcpo": (CLIP, (">", 0.005), CLIP_WHY + " (group-contrastive tag bonus and length bonus, then GRPO)"),  # 0.106
    "gd2po": (CLIP, (">", 0.005), CLIP_WHY + " (rollouts with conflicting reward components dropped)"),  # 0.154
    "gdpo_decoupled": (CLIP, (">", 0.005), CLIP_WHY + " (per-component group z-scores, whitened)"),  # 0.106
    "gmpo": (CLIP, (">", 0.005), "token clip (e^-0.4, e^0.4) of the geometric mean, in log space"),  # 0.075
    "grpo": (CLIP, (">", 0.005), CLIP_WHY),  # 0.128
    "grpo_vllm": (CLIP, (">", 0.005), CLIP_WHY + " (rollouts from vLLM, truncated IS on the mismatch)"),
    "grpo_passk": (CLIP, (">", 0.005), CLIP_WHY + " (only each group's best sample is trained)"),  # 0.100
    "grpo_judge": (CLIP, (">", 0.005), CLIP_WHY + " (the judge's score is a second reward component)"),  # 0.131
    "gspo": (CLIP, (">", 0.05), "sequence-level ratio outside its tiny range (3e-4, 4e-4)"),  # 0.449
    "info_ppo": (CLIP, (">", 0.005),  # 0.017
                 "ratio outside the entropy-adaptive bounds [1/(1+ln(1+eps_lo rho)), 1+ln(1+eps_hi rho)]"),
    "kl_cov": (ESS, ("<", 0.99),  # 0.867
               "the |log r| penalty on the top-covariance tokens is 0 where r = 1; ESS < 1 shows ratios away from 1 "
               "for it to act on"),
    "mc_grpo": (CLIP, (">", 0.005), CLIP_WHY + " (second of num_iterations = 2 epochs)"),  # 0.020
    "ngrpo": (CLIP, (">", 0.005), "asymmetric clip 0.16/0.24: " + CLIP_WHY),  # 0.230
    "nlpo": (CLIP, (">", 0.005), CLIP_WHY + " (5 epochs x 20 minibatches)"),  # 0.315
    "oblr_po": (CLIP, (">", 0.005), CLIP_WHY + " (its SNR factor shrinks the lr, so the drift)"),  # 0.031
    "poise": (CLIP, (">", 0.005), "clip 0.2/0.28: " + CLIP_WHY),  # 0.244
    "ppo": (CLIP, (">", 0.005), CLIP_WHY + " (the dual clip at 3 does not fire here)"),  # 0.108
    "r2vpo": (("policy/ratio_variance",), (">", 1e-3),  # 0.036
              "the ratio-variance penalty lambda V, V = mean (r - 1)^2, is 0 on-policy; the replayed stale "
              "batches make V > 0"),
    "redippo": (CLIP, (">", 0.005), "clip-higher 0.2/0.28: " + CLIP_WHY),  # 0.087
    "reinforce_pp": (CLIP, (">", 0.005), CLIP_WHY),  # 0.183
    "rgpo": (CLIP, (">", 0.005), CLIP_WHY + " (groups with no correct answer get a hint-guided answer)"),
    "rloo": (CLIP, (">", 0.005), CLIP_WHY),  # 0.109
    "sapo": (ESS, ("<", 0.99),  # 0.866
             "the sigmoid gate's gradient weight 4 sigma'(tau (r - 1)) r is 1 only at r = 1; ESS < 1 shows ratios "
             "away from 1, where the soft trust region attenuates"),
    "spo": (CLIP, (">", 0.005), "clip 0.2/0.28 with dual clip 10: " + CLIP_WHY),  # 0.099
    "srpo": (CLIP, (">", 0.005), "clip 0.2/0.28 on the GRPO branch (correct rollouts): " + CLIP_WHY),  # 0.159
    "trust_the_batch": (("policy/ess",), ("<", 0.99),  # 0.900
                        "the batch ESS caps the REINFORCE weight (rho = min(r, ESS)) and switches on the (1 - ESS) KL "
                        "pull to pi_old; both are inert at ESS = 1"),
    "verpo_evidence": (CLIP, (">", 0.005),  # 0.069
                       "clip 0.2/0.28 beside the reference and evidence channels: " + CLIP_WHY),
    "verpo_tests": (CLIP, (">", 0.005), CLIP_WHY + " (dense difficulty-weighted unit-test advantages)"),  # 0.160
    "vpo": (CLIP, (">", 0.005), CLIP_WHY + " (answer-set scores under Dirichlet scalarizations)"),  # 0.098
    "vulpo": (CLIP, (">", 0.005), CLIP_WHY + " (judged rewards scaled by label and prompt difficulty)"),  # 0.137
    "vspo_prs": (CLIP, (">", 0.005), CLIP_WHY + " (value-resampled groups, smoothed-std clipped advantages)"),
    "lambdamix": (CLIP, (">", 0.005), CLIP_WHY + " (adapters mixed per prompt by lambda; advantage sum_m lambda_m Z_m)"),  # 0.032
    "info_consistent_grpo": (CLIP, (">", 0.005), CLIP_WHY + " (paraphrase groups; verifier + entropy-consistency "
                             "reward)"),  # 0.104
    "fgrpo": (CLIP, (">", 0.005), CLIP_WHY + " (per-phase advantages on slate and rank tokens)"),  # 0.135
    "p2tpo": (CLIP, (">", 0.005), CLIP_WHY + " (element-priced token advantages)"),  # 0.028
    "rapo": (CLIP, (">", 0.005), "clip-higher 0.2/0.28: " + CLIP_WHY + " (RAPO's batch-rank and absolute score "
             "rewards)"),  # 0.128
    "mba": (CLIP, (">", 0.005), CLIP_WHY + " (a rule judge's two criteria, weighted: judge_multi)"),  # 0.198
    "con_grpo": (CLIP, (">", 0.005), CLIP_WHY + " (accuracy + format + rule-judged consistency)"),
    "grpo_vision": (CLIP, (">", 0.005), CLIP_WHY + " (a vision-language policy: prompts carry pictures)"),  # 0.101
    "gdpo_diffusion": (CLIP, (">", 0.005), "sequence ratio exp(ELBO - ELBO_old) of the diffusion LM outside "
                       "[0.8, 1.2]: fraction of responses clipped (0 when on-policy)"),  # 0.096
}

MULTI_TURN_ON_POLICY = ("a multi-turn credit-assignment recipe on gigpo's loop: one update per rollout batch of step "
                       "rows, so the methods differ only in their advantages and rollout trees")

# recipe -> why it stays on-policy (one update per rollout batch, asserted below)
EXEMPT = {
    "agent_grpo": "the multi-turn baseline keeps gigpo's single update per rollout batch, so the two differ only in "
                  "the step-level advantage",
    "gigpo": "the first multi-turn recipe takes one update per rollout batch of step rows (verl-agent's split of "
             "step rows into PPO mini-batches is not mirrored yet: issue #9)",
    "gpg": "GPG's loss is plain REINFORCE with no importance ratio (-alpha A logp), valid only on-policy; the "
           "authors' open-r1 configs take one update per generation batch (num_iterations 1)",
    "opo": "OPO is 'exact on-policy' by design: ppo_mini_batch_size = train_batch_size (verl docs/algo/opo.md)",
    "appo": MULTI_TURN_ON_POLICY + " (APPO)",
    "bipace": MULTI_TURN_ON_POLICY + " (BiPACE)",
    "cipo": MULTI_TURN_ON_POLICY + " (CIPO)",
    "g2po": MULTI_TURN_ON_POLICY + " (G2PO)",
    "himpo": MULTI_TURN_ON_POLICY + " (HiMPO)",
    "iapo": MULTI_TURN_ON_POLICY + " (IAPO)",
    "igpo": MULTI_TURN_ON_POLICY + " (IGPO)",
    "infopo": MULTI_TURN_ON_POLICY + " (InfoPO)",
    "mapo": MULTI_TURN_ON_POLICY + " (MAPO)",
    "opo_observation": MULTI_TURN_ON_POLICY + " (OPO (observation))",
    "planpo": MULTI_TURN_ON_POLICY + " (PlanPO)",
    "reflectpo": MULTI_TURN_ON_POLICY + " (ReflectPO)",
    "rtpo": MULTI_TURN_ON_POLICY + " (RTPO)",
    "sopo": MULTI_TURN_ON_POLICY + " (SOPO)",
    "harmony_guard": MULTI_TURN_ON_POLICY + " (HarmonyGuard)",
    "gigpo_code": MULTI_TURN_ON_POLICY + " (GiGPO on CodeFix)",
    "didpo": MULTI_TURN_ON_POLICY + " (DiDPO)",
    "inspo": MULTI_TURN_ON_POLICY + " (INSPO: the instruction population changes only the prompts)",
    "self_hpo": MULTI_TURN_ON_POLICY + " (Self-HPO: the harness changes only the prompts and turn limits)",
    "retroformer": "Retroformer's retrospective model takes one update per rollout batch of reflection rows, as the "
                   "multi-turn recipes do (the paper's PPO via trl is not mirrored)",
    "gkd": "GKD is on-policy distillation: the student's own samples scored by the teacher, one update per rollout "
           "batch, and no importance ratio in its loss (policy_loss none)",
    "kepo": "KEPO's RL term is one on-policy step (exp(logp - sg(logp)) A, no clipping; TRL GRPO num_iterations 1), "
            "its distillation term reads the current student",
    "remax": "ReMax is REINFORCE with a greedy baseline; its code makes one update per generation batch "
             "(generation batch = training batch, ppo_epochs 1)",
    **{name: f"{method} has no importance ratio or trust region to pi_old (the frozen reference, or the past "
             f"iterates, anchor it): one optimizer step per batch of pairs, as in TRL's DPOTrainer{where}"
       for name, method, where in (
           ("dpo", "DPO", "; offline pairs, old_logp from the engine's forward of the current policy"),
           ("ipo", "IPO", "; offline pairs"),
           ("online_dpo", "Online DPO", " and the paper's online loop"),
           ("mnpo", "MNPO", " and the authors' one pass over each iteration's pairs"),
           ("inpo", "INPO", " and the authors' one pass over each iteration's pairs"),
           ("oppo", "OPPO (NLL + context triplet)", "; offline pairs"))},
    "prime": "PRIME's scripts (PRIME-RL/PRIME run_prime_main.sh, verl recipe/prime) set ppo_mini_batch_size = "
             "train_batch_size with 1 epoch: one policy update per rollout batch (the implicit PRM trains beside it)",
}

# extra overrides of a recipe's run, with the reason
EXTRA = {
    # one sample per prompt and binary correctness: 64 prompts give the 64 rows the others get from 8 x 8;
    # with 8 every advantage is 0 (the tracker's baseline matches every reward)
    "spo": ["rollout.prompts_per_step=64"],
    # DRPO's objective needs a group with a correct and a wrong answer; on its task (countdown_trace, 2 numbers) the
    # fixture's model (hidden 32, one layer) answers ~0 % even after 150 warm-start steps (seed 2 trains nothing);
    # hidden 64, two layers and 300 steps on 2000 problems (one more cached warm start, ~15 s) answer 3-14 % at step 1
    # and give such groups with seeds 0-2 (as tests/train/test_task_mechanisms.py)
    "drpo": ["model.tiny.hidden_size=64", "model.tiny.num_layers=2", "model.tiny.intermediate_size=128",
             "warm_start.steps=300", "warm_start.examples=2000", "rollout.prompts_per_step=8"],
    # the code task after 40 warm-start steps passes ~1 % of the hidden tests: most steps have no test-level signal
    # and seeds 1-2 train no row (clip 0); 150 steps (one more cached warm start, ~40 s) pass 3-19 % of them at
    # step 1, and every seed 0-2 clips > 0.1
    "verpo_tests": ["warm_start.steps=150"],
    # TextGrid episodes: after 40 warm-start steps the tiny model solves none, every advantage is 0 and no
    # row is trained; up to 200 (it stops at its 35 % target, 90 steps) give groups that differ (~30 % solved)
    "gigpo": ["warm_start.steps=200"],
    "agent_grpo": ["warm_start.steps=200"],
    # tool_calc after 40 warm-start steps writes no well-formed call: every group is constant, the value sampler
    # drops them all and nothing is trained; 150 steps (as tests/train/test_vspo_prs.py) mix formats
    "vspo_prs": ["warm_start.steps=150", "warm_start.target_accuracy=null", "rollout.samples_per_prompt=4"],
    # shape_count after 40 warm-start steps answers every picture wrong: all advantages are 0 and nothing trains;
    # 150 steps (it stops at its 35 % target) give mixed groups
    "grpo_vision": ["warm_start.steps=150"],
    # slate_rank after 40 warm-start steps writes no well-formed S:...|R:... answer: every advantage is 0
    "fgrpo": ["warm_start.steps=150"],
    # rapo warm-starts at lr 1e-3 (its image tower then learns); 40 such steps write no parseable score, so every
    # reward is 0: the fixture's 40 steps at 3e-3 write scores (the image ignored, which this test does not need)
    "rapo": ["warm_start.lr=3e-3"],
    # the vision model after 40 warm-start steps writes no <answer> block: every group is all-zero
    "con_grpo": ["warm_start.steps=800", "warm_start.target_accuracy=null"],
    # the new multi-turn recipes: the tiny warm start solves few episodes and many advantages are 0; the update
    # then runs on every row anyway, which is what this test checks (one on-policy update per batch)
    **{name: ["train.skip_zero_advantage_rows=false"] for name in ("appo", "bipace", "cipo", "g2po", "himpo", "iapo", "igpo", "infopo", "mapo", "opo_observation", "planpo", "reflectpo", "rtpo", "sopo", "harmony_guard", "retroformer",
                                                                  "gigpo_code", "didpo", "inspo", "self_hpo")},
    # the shipped recipe asks for an HTTP judge server and labelled vulnerability data: a labelled toy task and a
    # three-criterion causal judge (the frozen warm-started policy) instead
}

RECIPES = sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))
OPS = {"<": operator.lt, ">": operator.gt}


def run(name, tiny, tmp_path):
    minibatches = load_recipe(name).train.minibatches
    overrides = [*tiny, "seed=0", "optim.lr=5e-3", f"rollout.prompts_per_step={max(4, minibatches)}",
                 *EXTRA.get(name, []), *recipe_extras(name)]
    rows = Trainer(load_recipe(name, overrides), tmp_path, log=lambda *_: None).run()
    return [row for row in rows if row["step"] > 0]


def test_every_recipe_is_listed():
    assert not set(MECHANISMS) & set(EXEMPT)
    assert sorted({*MECHANISMS, *EXEMPT}) == RECIPES


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_mechanism_acts(name, tiny, tmp_path):
    keys, (op, threshold), why = MECHANISMS[name]
    rows = run(name, tiny, tmp_path)
    values = [sum(row[k] for k in keys) for row in rows if all(k in row for k in keys)]
    assert values, f"{name}: no step reported {keys}"
    assert all(math.isfinite(v) for v in values), (name, values)
    mean = sum(values) / len(values)
    assert OPS[op](mean, threshold), f"{name}: mean {' + '.join(keys)} = {mean:.4g} per step {values}, " \
                                     f"expected {op} {threshold} ({why})"


@pytest.mark.parametrize("name", sorted(EXEMPT))
def test_exempt_recipe_stays_on_policy(name, tiny, tmp_path):
    rows = [row for row in run(name, tiny, tmp_path) if "policy/ratio_ess" in row]
    assert rows, f"{name}: no step trained"
    for row in rows:
        # exactly on-policy up to float32 round-off between the sampler's and the update's forward (~1e-7)
        assert row["policy/ratio_ess"] == pytest.approx(1.0, abs=1e-5), (name, row["step"], EXEMPT[name])
        assert row["policy/kl_old"] == pytest.approx(0.0, abs=1e-5), (name, row["step"], EXEMPT[name])
