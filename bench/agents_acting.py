"""Does each agent method's own mechanism act at its shipped settings, and where do its signals come from? (#35)

    python bench/agents_acting.py                              # every agent recipe: 6-step runs, seed 0
    python bench/agents_acting.py --only appo,bipace           # some of them
    python bench/agents_acting.py --write docs/agents.md       # replace the table between the agents-acting markers

An agent recipe is one whose engine plays environment episodes (``multi_turn``, ``reverse_turn``,
``harmony_guard``, ``self_hpo``, ``inspo``, ``retroformer``) or whose task is ``environment``; the script finds
them in polo/recipes. Each runs ``polo train RECIPE train.steps=6 seed=0`` as shipped, two at a time. A row
names the method's environment, the source of every signal its estimator or engine reads besides the episode
reward (``oracle``: an answer key only polo's own environments hold, with its field; ``model``: a role or a
probe of the policy; ``env``: what any environment shows, such as observations, actions or a code diff), the
metrics that show *its* mechanism acting, their means over the steps whose metrics row carries them, and the
condition under which the mechanism acted. A row whose condition fails prints "NO". A recipe missing from
``ACTING`` prints as "to fill".

Runs, not tests: the tests that assert each mechanism acts live beside each method's tests.
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

import yaml
from common import write_marked

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "polo" / "recipes"
AGENT_ENGINES = {"multi_turn", "reverse_turn", "harmony_guard", "self_hpo", "inspo", "retroformer"}
OPS = {">": operator.gt, "<": operator.lt}
TO_FILL = "to fill"
"""Marks a recipe missing from ``ACTING``."""


@dataclass(frozen=True)
class Check:
    metric: str
    op: str
    bound: float


@dataclass(frozen=True)
class Acting:
    method: str
    signals: tuple[str, ...]
    """``"<signal>: <oracle|model|env> (<where it comes from>)"``, one per signal besides the episode reward."""
    checks: tuple[Check, ...]
    shows: str
    steps: int | None = None
    """Steps of its run when the mechanism first acts later than ``--steps`` (an outer loop's first round)."""


ACTING: dict[str, Acting] = {
    # ---- filled (#35 item 5) ----
    "opo_observation": Acting(
        "OPO", ("evidence ev: oracle (KBLookup `ev`: the observation holds a gold-chain fact not yet retrieved)",
                "event uncertainty: model (the policy's sampling entropy of the argument tokens)"),
        (Check("opo_observation/informative_groups", ">", 0.0),),
        "branch groups a step whose siblings' evidence differs: a nonzero sibling advantage on the argument tokens"),
    "bipace": Acting(
        "BiPACE", ("states: model (the policy's last-layer hidden state at the last context token, centred per task)",
                   "actions: env (the action text)"),
        (Check("bipace/clusters_per_task", ">", 1.0), Check("bipace/return_var_ratio", "<", 1.0)),
        "hidden-state clusters per task, and the returns' spread within them over that within the task (1: one "
        "cluster a task, the step term is GiGPO's episode mean)"),
    "appo": Acting(
        "APPO", ("token entropy: model (the policy's sampling entropy)",
                 "future likelihood gain: model (log-ratio of the policy to the reference role)"),
        (Check("appo/branch_entropy_ratio", ">", 1.0), Check("appo/branch_scale_mean", ">", 1.0)),
        "branch token's entropy over its episode's mean (the score picks uncertain tokens from step 1), and the "
        "procedure scale 1 + alpha * gain (above 1 once the policy has moved from the reference)"),
    "didpo": Acting(
        "DiDPO", ("sub-diffs: env (CodeFix `subdiffs`: the step's code diff split into changed line ranges)",),
        (Check("didpo/diff_adv_abs_mean", ">", 0.0), Check("didpo/covered_token_frac", ">", 0.0)),
        "|diff-level advantage| of anchor occurrences and the share of tokens an anchor covers (the size term "
        "phi(s) is constant on CodeFix: every sub-diff is one line)"),
    "agent_grpo": Acting("trajectory GRPO (the baseline)", ("none: the episode return only",),
                         (Check("advantage/abs_max", ">", 0.0),), "largest |advantage| (no mechanism of its own)"),
    "gigpo": Acting("GiGPO", ("anchor states: env (the observation an action was taken in)",),
                    (Check("gigpo/step_adv_abs_mean", ">", 0.0),),
                    "|step advantage| over groups of turns taken in the same state"),
    "gigpo_code": Acting("GiGPO (CodeFix)", ("anchor states: env (the observation an action was taken in)",),
                         (Check("gigpo/step_adv_abs_mean", ">", 0.0),),
                         "|step advantage| over groups of turns taken in the same state"),
    "g2po": Acting("G2PO", ("state graph: env (observations and the transitions between them)",),
                   (Check("g2po/td_abs_mean", ">", 0.0),), "|TD error| on the group's state graph"),
    "igpo": Acting("IGPO", ("gold log-prob: model probe (the policy's log-prob of the gold answer: needs `gold`)",),
                   (Check("igpo/ig_abs_mean", ">", 0.0),), "|information gain| per turn"),
    "infopo": Acting("InfoPO", ("information gain: model (the next action's log-ratio, real vs placeholder "
                                "observation)",),
                     (Check("infopo/intrinsic_abs_mean", ">", 0.0),), "|intrinsic advantage|"),
    "mapo": Acting("MAPO", ("turn judgment: oracle (GuessNum `judge_score`; `advantage.judge: role` reads the judge "
                            "role instead)",),
                   (Check("mapo/judge_std", ">", 0.0),), "spread of the per-turn judgments MAPO's returns are made of"),
    "planpo": Acting("PlanPO", ("turn counts and response lengths: env",),
                     (Check("planpo/coarse_abs_mean", ">", 0.0),),
                     "|coarse efficiency bonus| among a group's successful episodes"),
    "iapo": Acting("IAPO", ("influence graph: model (policy probe: action log-ratio with vs without each earlier "
                            "observation, edge above 0.5 nat/token; `influence: oracle` reads KBLookup's edges)",),
                   (Check("iapo/weight_max", ">", 1.0), Check("iapo/probe_oracle_kappa", ">", 0.0)),
                   "largest routing weight (1: the GRPO advantage spread evenly), and the probe's agreement with "
                   "the environment's own edges beyond chance (Cohen's kappa)"),
    "himpo": Acting("HiMPO", ("memory utility: model (gold answer's recoverability from memory: needs `gold`)",
                              "hindsight relevance: oracle (KBLookup `memory_relevance`; `relevance: probe` is the "
                              "policy's; it agrees with the oracle at r about 0.1 on the built-in model)"),
                    (Check("himpo/memory_adv_abs_mean", ">", 0.0),), "|memory advantage| on memory-writing turns"),
    "reflectpo": Acting("ReflectPO", ("erroneous states: env (repeated visit, invalid action, failed tool call)",
                                      "hints: template (`tree.hints.source: template`; `teacher` asks the teacher role)"),
                        (Check("reflectpo/err_frac", ">", 0.0), Check("reflectpo/tree_leaves_mean", ">", 1.0)),
                        "share of tree nodes flagged erroneous (hinted recovery branches grow from them) and leaves "
                        "per tree"),
    "cipo": Acting("CIPO", ("skills: mined each step from the successful episodes (the declared `s2` is offered only "
                            "when mining finds two searches in a row)",),
                   (Check("cipo/delta_abs_mean", ">", 0.0), Check("cipo/mined_offered", ">", 0.0)),
                   "|counterfactual outcome gain| on decision turns, and the share of steps mining offered the skill"),
    "sopo": Acting("SOPO", ("hints: template (GuessNum's Socratic reply; `engine.hints.source: teacher` asks the "
                            "teacher role, which may read the hidden number)",),
                   (Check("sopo/hinted_turn_frac", ">", 0.0), Check("sopo/discounted_frac", ">", 0.0)),
                   "share of turns that got a hint, and of successes whose advantage the hints discounted"),
    "harmony_guard": Acting("HarmonyGuard", ("risk and progress: oracle (the rule checker reads GuardedKB's policy "
                                             "document and gold chain; `checker: judge` asks the judge role)",),
                            (Check("harmony/regenerations_per_step", ">", 0.0), Check("harmony/rules_learned", ">", 0.0)),
                            "risky or off-task steps regenerated per step (the guard catches most before they are "
                            "played, so the -lam penalty itself fires on under 1 % of steps) and rules the Policy "
                            "Agent learned from violations"),
    "inspo": Acting("INSPO", ("instructions: the built-in proposer (mutations of the population's best)",),
                    (Check("inspo/proposed", ">", 0.0),),
                    "instructions proposed at an evolution round (every `prune_every` = 10 steps)", steps=11),
    "self_hpo": Acting("Self-HPO", ("harness proposals: the fixed mutator (`proposer: policy` has the policy write "
                                    "edits; the built-in policy wrote 0 valid of 4)",),
                       (Check("self_hpo/hard_tasks", ">", 0.0),),
                       "hard tasks the harness search is run on at the first round (after `round_steps` = 10)",
                       steps=11),
    "retroformer": Acting("Retroformer", ("reflections: the policy (the retrospective model) for a frozen actor",),
                          (Check("log_metric/retroformer/reflected_tasks", ">", 0.0),
                           Check("log_metric/retroformer/next_trial_success", ">", 0.0)),
                          "share of tasks with a failed trial that get a reflection, and the frozen actor's success "
                          "on the trial after a reflection (its first-trial success is 0 on those tasks)"),
    "rtpo": Acting("RTPO", ("none: continuation returns",),
                   (Check("rtpo/informative_nodes", ">", 0.0),),
                   "share of nodes whose continuations end differently (their turn-k actions get a nonzero "
                   "advantage); `rtpo/level` is the level trained"),
}


def agent_recipes() -> dict[str, dict]:
    """Every shipped recipe that plays environment episodes: name → its YAML mapping."""
    found = {}
    for path in sorted(RECIPES.glob("*.yaml")):
        recipe = yaml.safe_load(path.read_text())
        engine, task = recipe.get("engine") or {}, recipe.get("task") or {}
        engine = engine.get("name") if isinstance(engine, dict) else engine
        task = task.get("name") if isinstance(task, dict) else task
        if engine in AGENT_ENGINES or task == "environment":
            found[path.stem] = recipe
    return found


def environment(recipe: dict) -> str:
    env = (recipe.get("task") or {}).get("env") or {}
    name = env.get("name", "?") if isinstance(env, dict) else str(env)
    knobs = ", ".join(f"{k}: {v}" for k, v in env.items() if k != "name") if isinstance(env, dict) else ""
    return f"{name} ({knobs})" if knobs else name


def run(name: str, acting: Acting | None, folder: Path, steps: int) -> dict:
    """The recipe's ``steps``-step run: each check's mean over the rows that carry its metric, and the verdict."""
    out = folder / name
    steps = acting.steps or steps if acting else steps
    cmd = [sys.executable, "-m", "polo.cli", "train", name, f"train.steps={steps}", "seed=0", "--run-dir", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["?"]
        return {"values": [], "acts": False, "note": f"exit {done.returncode}: {tail[0][:120]}"}
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    values, acts, missing = [], True, []
    for check in acting.checks if acting else ():
        seen = [row[check.metric] for row in rows if row.get("step", 0) > 0 and check.metric in row]
        mean = sum(seen) / len(seen) if seen else None
        values.append(mean)
        acts &= mean is not None and OPS[check.op](mean, check.bound)
        missing += [check.metric] if mean is None else []
    note = f"no row has {', '.join(missing)}" if missing else "" if acting and acting.checks else "no check"
    return {"values": values, "acts": acts and bool(acting and acting.checks), "note": note}


def table(results: list[tuple[str, dict, Acting | None, dict]], steps: int) -> str:
    lines = [f"| method | recipe | environment | signal sources | diagnostic | mean over steps 1-{steps} | acts when | "
             "acted | what it shows |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, recipe, a, r in results:
        method = (a.method if a else f"{name} ({TO_FILL})") + (f" ({a.steps} steps)" if a and a.steps else "")
        signals = "<br>".join(a.signals) if a else TO_FILL
        checks = a.checks if a else ()
        metric = "<br>".join(f"`{c.metric}`" for c in checks) or TO_FILL
        value = "<br>".join("—" if v is None else f"{v:.4g}" for v in r["values"]) or "—"
        when = "<br>".join(f"{c.op} {c.bound:g}" for c in checks) or "—"
        acted = "yes" if r["acts"] else "NO" + (f" ({r['note']})" if r["note"] else "")
        shows = (a.shows if a else TO_FILL).replace("|", "\\|")
        lines.append(f"| {method} | `{name}` | {environment(recipe)} | {signals.replace('|', '/')} | {metric} | "
                     f"{value} | {when} | {acted} | {shows} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated recipes (default: every agent recipe)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--write", default="", help="a page whose table between the agents-acting markers is replaced")
    args = parser.parse_args()
    recipes = agent_recipes()
    only = set(filter(None, args.only.split(",")))
    if only - set(recipes):
        parser.error(f"--only: {sorted(only - set(recipes))} are not agent recipes; known: {', '.join(recipes)}")
    chosen = [name for name in recipes if not only or name in only]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        runs = pool.map(lambda n: run(n, ACTING.get(n), Path(tmp), args.steps), chosen)
        results = [(n, recipes[n], ACTING.get(n), r) for n, r in zip(chosen, runs)]
    text = table(results, args.steps)
    print(text)
    print(f"\n{sum(r['acts'] for *_, r in results)} of {len(results)} mechanisms acted")
    if args.write:
        write_marked(args.write, "agents-acting", text)


if __name__ == "__main__":
    main()
