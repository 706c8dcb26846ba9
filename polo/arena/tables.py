"""The arena's tables as plain data (title, header, rows, note), rendered to Markdown or HTML elsewhere."""
from __future__ import annotations

import math
from dataclasses import dataclass

from polo.arena.stats import CONFIDENCE, RESAMPLES, Interval
from polo.arena.summary import ACCURACY, EntrySummary, Ranked


@dataclass
class Table:
    title: str
    header: list[str]
    rows: list[list[str]]
    note: str = ""


def fmt(value: float | None, digits: int = 3, sign: str = "") -> str:
    """``value`` rounded to ``digits`` places, ``–`` when missing; ``sign="+"`` writes a plus on gains."""
    if value is None or math.isnan(value):
        return "–"
    return f"{round(value, digits) + 0.0:{sign}.{digits}f}"  # + 0.0: no "-0.000"


def fmt_interval(i: Interval, digits: int = 3) -> str:
    return f"{fmt(i.mean, digits)} [{fmt(i.low, digits)}, {fmt(i.high, digits)}]"


def fmt_seconds(seconds: float | None) -> str:
    return "not reached" if seconds is None else f"{seconds:.0f} s"


def fmt_time(entry: EntrySummary) -> str:
    """``2/3 seeds reached; median 41 s``, ``1/3 seeds reached; median not reached`` or ``0/3 seeds reached``."""
    reached = f"{entry.reached}/{len(entry.runs)} seeds reached"
    return f"{reached}; median {fmt_seconds(entry.time_to_target)}" if entry.reached else reached


def metric_names(metric: str) -> tuple[str, str, str, str]:
    """(column, short column, title word, description) of the metric an arena ranks by: held-out greedy accuracy,
    or a control method's evaluation key as it is (``eval/return``)."""
    if metric == ACCURACY:
        return "greedy acc.", "acc.", "accuracy", "held-out greedy accuracy"
    return metric, metric, metric, f"the evaluation's {metric}"


def results_table(entries: list[EntrySummary], recipes: dict[str, str], target: float, metric: str = ACCURACY
                  ) -> Table:
    column, _, title, described = metric_names(metric)
    header = ["entry", "recipe", "seeds", f"final {column} [95% CI]", f"time to {target:g}",
              "steps", "train s", "tokens/s", "resp. length", "entropy", "KL(old‖new)", "clip frac.",
              "frac. zero-std groups"]
    rows = []
    for e in entries:
        d = e.diagnostics
        steps = sorted({r.steps for r in e.runs})
        rows.append([
            e.label, recipes.get(e.label, ""), ",".join(map(str, e.seeds)) or "none",
            fmt_interval(e.final_accuracy), fmt_time(e) if e.runs else "–",
            "/".join(map(str, steps)) or "–", fmt(sum(r.wall_s for r in e.runs) / len(e.runs), 0) if e.runs else "–",
            fmt(d["tokens_per_s"], 0), fmt(d["response_length"], 2), fmt(d["entropy"], 3), fmt(d["kl"], 4),
            fmt(d["clip_frac"], 4), fmt(d["frac_reward_zero_std"], 3),
        ])
    note = (f"Final {title}: {described} at each run's last step; mean over seeds with a "
            f"{CONFIDENCE:.0%} percentile-bootstrap interval ({RESAMPLES:,} resamples of the seeds, fixed RNG seed). "
            f"Time to target: how many seeds reached {target:g} at an evaluation, and the median over seeds of the "
            f"training seconds (elapsed_s, without model loading) until the first evaluation at or above it (a "
            f"seed that never gets there counts as infinite, so the median is not reached when half the seeds or "
            f"more never get there). Train s: mean training seconds per run. The other columns are "
            f"per-step means, averaged over seeds: tokens/s of the training step, response length in tokens, "
            f"policy entropy, approximate KL to the behaviour policy (policy/kl_old), clip fraction (low + high "
            f"side) and the fraction of prompt groups whose rewards are all equal.")
    return Table("Results per entry", header, rows, note)


def ranking_table(ranked: list[Ranked], seeds: int, metric: str = ACCURACY) -> Table:
    column, _, title, _ = metric_names(metric)
    header = ["rank", "entry", "tier", f"final {column} [95% CI]", "Δ vs best [95% CI]", "p (vs best)"]
    rows = []
    for r in ranked:
        test = r.vs_best
        rows.append([str(r.rank), r.entry.label, str(r.tier), fmt_interval(r.entry.final_accuracy),
                     "–" if test is None else fmt_interval(test.diff), "–" if test is None else f"{test.p_value:.3f}"])
    note = (f"Ranked by mean final {title}. Test: bootstrap test of the difference of mean final {title} at "
            f"{1 - CONFIDENCE:.0%}, paired by seed (the same seed gives both entries the same warm start and "
            f"prompt stream; the per-seed differences are resampled, {RESAMPLES:,} times) — unpaired when fewer "
            f"than 2 seeds are shared. Two entries differ when the {CONFIDENCE:.0%} interval of the difference "
            f"excludes 0. Tiers: going down the ranking, an entry joins the current tier when it is not "
            f"distinguishable from that tier's best entry, otherwise it starts the next tier. With {seeds} "
            f"seed(s) the bootstrap is coarse (with 3 seeds, a paired difference is significant exactly when "
            f"it has the same sign on every seed): treat tiers as indicative, and add seeds to sharpen them.")
    return Table(f"Ranking by final {title}", header, rows, note)


def seeds_table(entries: list[EntrySummary], target: float, metric: str = ACCURACY) -> Table:
    _, short, title, described = metric_names(metric)
    header = ["entry", "seed", f"warm-start {short}", f"final {short}", "gain", f"time to {target:g}"]
    rows = []
    for e in entries:
        for r in e.runs:
            warm = r.warm_accuracy
            rows.append([e.label, str(r.seed), fmt(warm), fmt(r.final_accuracy),
                         fmt(None if warm is None else r.final_accuracy - warm, sign="+"),
                         fmt_seconds(r.time_to(target))])
    note = (f"Warm-start {title}: {described} of the step-0 evaluation, before any update. Final {title}: at the "
            f"run's last step. "
            f"Gain: final minus warm start. Time to {target:g}: training seconds until the first evaluation at or "
            "above it.")
    return Table("Results per seed", header, rows, note)


def config_table(differences: dict[str, dict[str, str]], labels: list[str]) -> Table:
    rows = [[key, *(values[label] for label in labels)] for key, values in differences.items()]
    note = ("The settings of the resolved recipes (every default filled in, as in each run's config.yaml) whose "
            "values are not the same in every entry; all other settings are shared. (absent): the entry's "
            "component has no such setting." + ("" if rows else " No setting differs."))
    return Table("What differs between entries", ["setting", *labels], rows, note)
