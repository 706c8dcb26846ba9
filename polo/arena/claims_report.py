"""Claims as the report shows them: a table of tests per claim, the rule as a note, and their JSON record
(``summary.json``'s ``claims``, which ``polo arena-claims`` gathers over several arenas)."""
from __future__ import annotations

from polo.arena.claims import ClaimResult, threshold
from polo.arena.stats import CONFIDENCE, RESAMPLES
from polo.arena.tables import Table, fmt

CLAIMS_NOTE = (
    f"Each test compares the treatment entry with the baseline entry seed by seed: d = treatment − baseline, "
    f"negated when lower is better (so d > 0 means the treatment did better), over the seeds where both have a "
    f"finished run with a value. [low, high] is the {CONFIDENCE:.0%} paired percentile-bootstrap interval of the "
    f"mean of d ({RESAMPLES:,} resamples of the seeds, fixed RNG seed). The test asks d > t, with t = margin "
    f"(superiority) or t = −margin (non-inferiority): held when low > t, not held when high ≤ t, inconclusive "
    f"otherwise or with fewer than 2 paired seeds. A claim is held when every test is held, not held when any "
    f"is not held, inconclusive otherwise. With 2 or 3 seeds the interval runs from the smallest to the largest "
    f"per-seed difference, so a test holds only when the treatment is ahead by more than t on every seed. "
    f"t [low, high]: the paired t interval of the mean of d (wider than the bootstrap's at few seeds). "
    f"MDE: the smallest true mean of d a paired t-test at 5 % detects with 80 % power at the seeds run, "
    f"(t_0.975,n−1 + t_0.8,n−1)·sd(d)/√n; seeds to decide: the smallest n at which that reaches the observed "
    f"|mean d − t| at the observed spread (for inconclusive tests). "
    f"Metrics: docs/arena.md (time_to_target / steps_to_target: a run that never reaches the target counts as "
    f"the arena's longest run).")


def claims_json(results: list[ClaimResult]) -> list[dict]:
    """One record per claim, its tests with their numbers: what the report's tables and ``polo arena-claims``
    are made from."""
    return [{
        "id": c.claim.id, "statement": c.claim.statement, "paper": c.claim.paper,
        "treatment": c.claim.treatment, "baseline": c.claim.baseline, "verdict": c.verdict,
        "tests": [{
            **r.test.model_dump(), "threshold": threshold(r.test), "seeds": r.seeds,
            "treatment_mean": r.mean(r.treatment), "baseline_mean": r.mean(r.baseline),
            "diff": None if r.diff is None else vars(r.diff), "verdict": r.verdict, "reason": r.reason,
            "treatment_by_seed": r.treatment, "baseline_by_seed": r.baseline,
            "t_interval": r.t_interval, "mde": r.mde, "seeds_to_decide": r.seeds_to_decide,
        } for r in c.tests],
    } for c in results]


def _bound(test: dict) -> str:
    return f"d > {test['threshold'] + 0.0:g}"  # + 0.0: no "-0"


def rule_text(test: dict) -> str:
    """``higher is better; superiority: d > 0`` or ``lower is better; non-inferiority: d > -0.03``."""
    return f"{test['direction']} is better; {test['kind'].replace('_', '-')}: {_bound(test)}"


def interval_text(test: dict) -> str:
    """``+0.050 [+0.010, +0.090]``: the mean of d and its interval; ``–`` without one."""
    d = test["diff"]
    return "–" if d is None else f"{fmt(d['mean'], 3, '+')} [{fmt(d['low'], 3, '+')}, {fmt(d['high'], 3, '+')}]"


def power_text(test: dict) -> str:
    """``t [-0.010, +0.090]; MDE 0.052; ~23 seeds to decide``: the paired t interval and the power of a test at
    its seeds (``–`` without 2 paired seeds)."""
    if test.get("mde") is None:
        return "–"
    low, high = test["t_interval"]
    head = f"t [{fmt(low, 3, '+')}, {fmt(high, 3, '+')}]; MDE {fmt(test['mde'], 3)}"
    if test["verdict"] != "inconclusive":
        return f"{head}; decided"
    n = test["seeds_to_decide"]
    return f"{head}; " + ("no seed count decides it" if n is None else f"~{n} seeds to decide")


def verdict_text(test: dict) -> str:
    return f"{test['verdict']} ({test['reason']})" if test["reason"] else test["verdict"]


def claim_intro(claim: dict) -> list[str]:
    """The paragraphs above a claim's table: its statement, then its paper and entries."""
    return [claim["statement"], f"Paper: {claim['paper']}. Treatment: {claim['treatment']}; "
                                f"baseline: {claim['baseline']}."]


def claim_table(claim: dict) -> Table:
    """One row per test: metric, rule, each side's mean over the paired seeds, d with its interval, verdict."""
    header = ["metric", "test", f"{claim['treatment']} (mean)", f"{claim['baseline']} (mean)",
              f"d [{CONFIDENCE:.0%} CI]", "paired seeds", "power", "verdict"]
    rows = [[t["metric"], rule_text(t), fmt(t["treatment_mean"], 4), fmt(t["baseline_mean"], 4), interval_text(t),
             ",".join(map(str, t["seeds"])) or "none", power_text(t), verdict_text(t)] for t in claim["tests"]]
    return Table(f"{claim['id']}: {claim['verdict']}", header, rows, f"Claim verdict: {claim['verdict']}.")


def gathered_table(claims: list[tuple[str, dict]]) -> Table:
    """``(arena name, claim record)`` pairs as one table, a row per claim, its tests in one cell."""
    rows = [[c["id"], c["statement"], c["paper"], arena, f"{c['treatment']} vs {c['baseline']}",
             "; ".join(f"{t['metric']} ({t['direction']}, {_bound(t)}): {interval_text(t)} "
                       f"{verdict_text(t)} ({power_text(t)})" for t in c["tests"]),
             c["verdict"]] for arena, c in claims]
    return Table("Claims", ["claim", "statement", "paper", "arena", "treatment vs baseline",
                            f"tests: d [{CONFIDENCE:.0%} CI], verdict", "verdict"], rows, CLAIMS_NOTE)
