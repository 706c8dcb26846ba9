"""The numbers a claim compares: one value per run (per seed), read from the run's metric rows.

Accuracy is the held-out greedy accuracy (``eval/greedy_accuracy``) of the run's evaluations:

- ``final_accuracy``: at the last evaluation.
- ``best_accuracy``: the highest at any evaluation, the step-0 one (the warm start) included.
- ``accuracy_gain``: final minus the step-0 evaluation.
- ``auc``: the mean over the evaluations after step 0 (the area under the accuracy curve per evaluation;
  comparable between entries that evaluate at the same steps).
- ``time_to_target`` / ``steps_to_target``: training seconds (``elapsed_s``) / steps until the first
  evaluation at or above the arena's ``target_accuracy``. A run that never gets there counts as the arena's
  cap: the longest training time / the largest last step of any finished run of the arena, so it never
  scores better than a run of the same arena that got there. Lower is better.
- ``mean:<key>`` / ``last:<key>``: the mean over the steps that logged ``<key>`` / its value at the last step
  that logged it, for any key of ``metrics.jsonl`` (``mean:frac_reward_zero_std``, ``mean:response/length``,
  ``last:policy/entropy``; non-finite values are logged as null and skipped).

A value a run cannot give (no step-0 evaluation for ``accuracy_gain``, no evaluation after step 0 for
``auc``, a key the run never logged) is None: that seed has no value and is left out of the pairing.
"""
from __future__ import annotations

from dataclasses import dataclass

from polo.arena.summary import RunResult


@dataclass(frozen=True)
class Caps:
    """What a run that never reaches the target counts as: the arena's longest run, in seconds and in steps."""

    seconds: float
    steps: int

    @classmethod
    def of(cls, runs: list[RunResult]) -> "Caps":
        return cls(max((r.wall_s for r in runs), default=0.0), max((r.steps for r in runs), default=0))


def _mean_after_start(run: RunResult) -> float | None:
    after = [acc for step, _, acc in run.evals() if step > 0]
    return sum(after) / len(after) if after else None


def _gain(run: RunResult) -> float | None:
    warm = run.warm_accuracy
    return None if warm is None else run.final_accuracy - warm


def _last(run: RunResult, key: str) -> float | None:
    return next((r[key] for r in reversed(run.rows) if r.get(key) is not None), None)


_ACCURACY = {
    "final_accuracy": lambda run: run.final_accuracy,
    "best_accuracy": lambda run: max(acc for _, _, acc in run.evals()),
    "accuracy_gain": _gain,
    "auc": _mean_after_start,
}
METRICS = (*_ACCURACY, "time_to_target", "steps_to_target")
KEY_PREFIXES = ("mean:", "last:")


def check_metric(name: str) -> str:
    """``name`` if it is a known metric, else ValueError naming it and what is expected."""
    if name in METRICS or any(name.startswith(p) and len(name) > len(p) for p in KEY_PREFIXES):
        return name
    raise ValueError(f"unknown metric {name!r}; expected one of {', '.join(METRICS)}, "
                     f"or mean:<key> / last:<key> with a key of the runs' metrics.jsonl (e.g. mean:response/length)")


def run_metric(run: RunResult, name: str, target: float, caps: Caps) -> float | None:
    """The value of metric ``name`` (checked by ``check_metric``) for one run, as the module docstring defines
    it; None when the run cannot give it."""
    prefix, _, key = name.partition(":")
    if prefix == "mean":
        return run.diagnostic((key,))
    if prefix == "last":
        return _last(run, key)
    if name in ("time_to_target", "steps_to_target"):
        first = run.reaching(target)
        if name == "time_to_target":
            return caps.seconds if first is None else first[1]
        return float(caps.steps if first is None else first[0])
    return _ACCURACY[name](run) if run.evals() else None
