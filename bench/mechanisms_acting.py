"""Does each single-turn seed method's own mechanism act at its shipped settings? (issue #37)

    python bench/mechanisms_acting.py                      # all 36 methods: 4-step runs, seed 0, a markdown table
    python bench/mechanisms_acting.py --only cort,kepo     # some of them
    python bench/mechanisms_acting.py --write docs/mechanisms.md   # replace the table in that page

Each method of the single-turn, reward, guidance and preference families runs ``polo train RECIPE
train.steps=4 seed=0`` with its shipped recipe (built-in model, built-in task: no override except where a row
says "stand-in"), two runs at a time. Every row names the metric that shows *that method's* mechanism doing
something (not the PPO clip every recipe shares), its mean over the steps whose metrics row carries it, and
the condition under which the mechanism acted (a weight spread above 0, a share of rescued groups, ...).
A row whose condition fails is printed with "NO": the mechanism did not act in that run.

Runs, not tests: the tests that assert each mechanism acts are beside each method's own tests (short runs on
the tiny test model); this table is the shipped settings, as a user runs them.
"""
from __future__ import annotations

import argparse
import json
import operator
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from common import write_marked

ROOT = Path(__file__).resolve().parents[1]
OPS = {">": operator.gt, "<": operator.lt}


@dataclass(frozen=True)
class Acting:
    recipe: str
    method: str
    metric: str
    """A metrics-row key, or ``"a - b"``: the difference of two."""
    condition: tuple[str, float]
    shows: str


ACTING = [
    # single-turn core (specs: single_turn_core)
    Acting("redippo", "ReDiPPO", "redippo/weight_std", (">", 0.0),
           "std of the critic-discrepancy token weights w (0: both critics agree, no token reweighted)"),
    Acting("spo", "SPO", "spo/rho_mean", ("<", 1.0),
           "mean KL-adaptive forgetting factor of the per-prompt value tracker (1: nothing forgotten)"),
    Acting("info_ppo", "InfoPPO", "policy/density_mean", (">", 0.0),
           "mean information density that sets the entropy-scaled discount and the adaptive clip range"),
    Acting("ngrpo", "NGRPO", "ngrpo/flat_rows_learning", (">", 0.0),
           "share of rows in equal-reward groups that still get an advantage from the virtual max sample"),
    Acting("mc_grpo", "MC-GRPO", "advantage/abs_max", (">", 3.0),
           "largest |advantage|: the median/MAD scale with eps 1e-3 blows up on discrete rewards (GRPO's max ~2.6)"),
    Acting("r2vpo", "R2VPO", "r2vpo/ratio_variance", (">", 0.0),
           "ratio variance V that the adaptive penalty lambda V acts on"),
    Acting("dgpo", "DGPO", "credit/max", (">", 1.0),
           "largest Hellinger x entropy token weight (1 everywhere: no redistribution)"),
    Acting("drpo", "DRPO", "policy/length_weight_spread", (">", 0.0),
           "spread of the length weights over a group's correct answers (0: equal lengths, no preference)"),
    Acting("ctpo", "CTPO", "policy/clip_frac_dual", (">", 0.0),
           "share of tokens whose cumulative-token ratio hit the dual clip"),
    Acting("trust_the_batch", "Trust the Batch", "policy/ess", ("<", 1.0),
           "normalized ESS of the batch's ratios that sets the objective's trust (1: on-policy, no adaptation)"),
    Acting("oblr_po", "OBLR-PO", "snr_lr/factor", ("<", 1.0),
           "SNR learning-rate factor (1: the step size is not adapted)"),
    Acting("poise", "POISE", "poise/probe_mse", (">", 0.0),
           "the value probe's squared error on the batch: its predictions, not the group mean, are the baseline"),
    # rewards, guidance, preferences (specs: single_turn_rewards_guidance_preference)
    Acting("vpo", "VPO", "vpo/scalarization_disagreement", (">", 0.0),
           "share of Dirichlet scalarizations whose best answer differs from the first draw's"),
    Acting("srpo", "SRPO", "srpo/routed_frac", (">", 0.0),
           "share of rollouts routed to self-distillation (failed with a correct sibling)"),
    Acting("verpo_tests", "VeRPO", "verpo/turn_reward", (">", 0.0),
           "difficulty-weighted share of unit tests passed (dense), beside pass-all verpo/pass_all"),
    Acting("dagrpo", "DaGRPO", "dagrpo/masked_pair_frac", (">", 0.0),
           "share of rollout pairs dropped as indistinct (|score gap| < delta)"),
    Acting("gdpo_decoupled", "GDPO", "gdpo/order_changes", (">", 0.0),
           "share of in-group row pairs that decoupled normalization orders differently from the summed reward"),
    Acting("gd2po", "GD2PO", "gd2po/drop_frac", (">", 0.0),
           "share of rollouts dropped because their normalized components disagree in sign"),
    Acting("vspo_prs", "VSPO + PRS", "log_metric/tool/calls_executed", (">", 0.0),
           "calculator calls executed per completion (tool-integrated reasoning)"),
    Acting("cort", "CoRT", "cort/spread", (">", 0.0),
           "mean |w - 1| of the token weights applied (the SmoothStep warm-up share x cort/target_spread, which is "
           "0.32 here: the warm-up runs 50 steps)"),
    Acting("verpo_evidence", "VERPO", "verpo_evidence/accepted_frac", (">", 0.0),
           "share of rollouts whose evidence is verified and regularized toward"),
    Acting("kepo", "KEPO", "log_metric/guided/groups_rescued", (">", 0.0),
           "all-wrong groups rescued by hint-guided rejection sampling, per step"),
    Acting("rgpo", "RGPO", "log_metric/guided/groups_rescued", (">", 0.0),
           "all-wrong groups rescued by a rationale-guided answer, per step"),
    Acting("fgrpo", "F-GRPO", "fgrpo/opposed_frac", (">", 0.0),
           "share of rows whose slate and rank advantages have opposite signs"),
    Acting("rapo", "RAPO (Aes-R1)", "rewards/rapo_rank/std", (">", 0.0),
           "spread of the rank-agreement reward of the predicted scores (0: every prediction ranks alike)"),
    Acting("con_grpo", "Con-GRPO (MedAD-R1)", "reward/think_consistency", (">", 0.0),
           "the consistency reward r_con r_fmt (0: no completion's reasoning concludes its answer)"),
    Acting("info_consistent_grpo", "Info-consistent GRPO", "rewards/info_consistency/std", (">", 0.0),
           "spread of the entropy helpfulness/stability reward within paraphrase groups"),
    Acting("lambdamix", "LambdaMix", "lambdamix/sign_vs_equal", (">", 0.0),
           "share of rows whose advantage sign under their own lambda differs from the equal-weight mix"),
    Acting("mnpo", "MNPO", "policy/mnpo_mix_gap", (">", 0.0),
           "|mix of the past iterates' log-ratios - the latest one's|: what the older iterate changes (0 = INPO)"),
    Acting("nlpo", "NLPO", "nlpo/masked_vocab_frac", (">", 0.0),
           "share of the vocabulary outside the masking policy's top-p nucleus at the response tokens"),
    Acting("p2tpo", "P2TPO", "p2tpo/block_token_frac", (">", 0.0),
           "share of tokens credited by their own element block"),
    Acting("gdpo_diffusion", "GDPO (diffusion)", "clip_ratio/region_mean", (">", 0.0),
           "share of sequences whose ELBO ratio exp(ELBO - ELBO_old) left the clip range (quadrature ELBO, "
           "shared masks)"),
    Acting("oppo", "OPPO", "policy/dist_rejected - policy/dist_chosen", (">", 0.0),
           "distance of z* to the rejected minus to the chosen responses' contexts (the triplet term's pull)"),
    # misc (specs: misc_methods)
    Acting("gcpo", "GCPO", "gcpo/tag_bonus_rows", (">", 0.0),
           "rows given the group-contrastive tag bonus"),
    Acting("vulpo", "VULPO", "vulpo/lambda_vul", (">", 0.0),
           "difficulty scale of vulnerable-label rows (built-in labelled task, rule judge)"),
    Acting("mba", "MBA", "rewards/judge_multi/std", (">", 0.0),
           "std of the judged reward sum_k w_k s_k (rule judge: verifier + digit credit)"),
]


def run(acting: Acting, folder: Path, steps: int) -> dict:
    """The recipe's ``steps``-step run; the metric's mean over the rows that carry it, and its condition."""
    out = folder / acting.recipe
    cmd = [sys.executable, "-m", "polo.cli", "train", acting.recipe, f"train.steps={steps}", "seed=0",
           "--run-dir", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["?"]
        return {"value": None, "acts": False, "note": f"exit {done.returncode}: {tail[0][:120]}"}
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    keys = acting.metric.split(" - ")  # one metric, or the difference of two
    values = [row[keys[0]] - sum(row[k] for k in keys[1:]) for row in rows
              if row.get("step", 0) > 0 and all(k in row for k in keys)]
    if not values:
        return {"value": None, "acts": False, "note": f"no row has {acting.metric}"}
    mean = sum(values) / len(values)
    op, bound = acting.condition
    return {"value": mean, "acts": OPS[op](mean, bound), "note": ""}


def table(results: list[tuple[Acting, dict]]) -> str:
    lines = ["| method | recipe | diagnostic | mean over steps 1-4 | acts when | acted | what it shows |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for a, r in results:
        value = "—" if r["value"] is None else f"{r['value']:.4g}"
        recipe = f"`{a.recipe}`"
        acted = "yes" if r["acts"] else "NO" + (f" ({r['note']})" if r["note"] else "")
        shows = a.shows.replace("|", "\\|")
        lines.append(f"| {a.method} | {recipe} | `{a.metric}` | {value} | {a.condition[0]} {a.condition[1]:g} | "
                     f"{acted} | {shows} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated recipes (default: all)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--write", default="", help="a page whose table between the acting markers is replaced")
    args = parser.parse_args()
    only = set(filter(None, args.only.split(",")))
    unknown = only - {a.recipe for a in ACTING}
    if unknown:
        parser.error(f"--only: {sorted(unknown)} are not in the table; known: {', '.join(a.recipe for a in ACTING)}")
    chosen = [a for a in ACTING if not only or a.recipe in only]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        results = list(zip(chosen, pool.map(lambda a: run(a, Path(tmp), args.steps), chosen)))
    text = table(results)
    print(text)
    print(f"\n{sum(r['acts'] for _, r in results)} of {len(results)} mechanisms acted")
    if args.write:
        write_marked(args.write, "acting", text)


if __name__ == "__main__":
    main()
