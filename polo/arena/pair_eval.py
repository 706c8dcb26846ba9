"""Pairwise accuracy of reward models on preference pairs: the harness of "Personalized RewardBench" (arXiv:2604.07343).

An item is a prompt with a ``chosen`` and a ``rejected`` response and, optionally, the user's ``user_rubric``, a
``domain`` and an ``id`` (the pair files ``polo rm`` trains on; ``polo.tasks.preferences.read_pairs``). A scorer is
anything with ``score(rubric, prompt, response) -> float`` (a classifier reward model: ``RewardModelScorer``); a
batched ``scores(rubrics, prompts, responses) -> list[float]`` is used when the scorer has one.

Conventions (the scoring rule follows RewardBench; ties, the interval and the control are this harness's choices):

- conditioning: the rubric is put ahead of the prompt with a template (``RUBRIC_TEMPLATE`` by default, with
  ``{rubric}`` and ``{prompt}``); an item without a rubric is scored on its prompt alone. The template is part
  of the report.
- per item ``c = 1[s_chosen > s_rejected]``: strict, a tie counts 0 (``ties=0.5``: half); a NaN score counts 0
  and is counted in ``nan_items``.
- accuracy = mean ``c``, with a 95 % percentile-bootstrap interval over items (1000 resamples of a seeded
  generator), overall and per domain (items without one: ``(none)``).
- no-rubric control: every item scored again on its prompt alone; a large drop shows the model reads the rubric
  (a diagnostic, not part of the score). Reported when some item has a rubric.
- downstream validity: across several reward models, the Pearson and Spearman correlations of their accuracies
  with a downstream score of each (best-of-N quality, quality of a policy trained with it).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Callable, Protocol

import numpy as np
import torch

from polo.arena.stats import bootstrap_ci, pearson, spearman
from polo.core.registry import ConfigError
from polo.policy.reward_model import RewardModel, pair_outcomes
from polo.tasks.base import Example
from polo.tasks.preferences import RUBRIC_TEMPLATE, check_template, condition, read_pairs
from polo.train.reward_model import both_sides

RESAMPLES = 1000
NO_DOMAIN = "(none)"


class PairScorer(Protocol):
    def score(self, rubric: str | None, prompt: str, response: str) -> float: ...


class RewardModelScorer:
    """A classifier reward model as a scorer: ``r(condition(template, rubric, prompt), response)``."""

    def __init__(self, rm: RewardModel, template: str = RUBRIC_TEMPLATE, batch_size: int = 64):
        self.rm, self.template, self.batch_size = rm, check_template(template), batch_size

    def scores(self, rubrics: Sequence[str | None], prompts: Sequence[str], responses: Sequence[str]) -> list[float]:
        conditioned = [condition(self.template, r, p) for r, p in zip(rubrics, prompts, strict=True)]
        return self.rm.score(conditioned, list(responses), self.batch_size).tolist()

    def score(self, rubric: str | None, prompt: str, response: str) -> float:
        return self.scores([rubric], [prompt], [response])[0]


def _scores(scorer: PairScorer, rubrics: list, prompts: list[str], responses: list[str]) -> torch.Tensor:
    batched = getattr(scorer, "scores", None)
    values = batched(rubrics, prompts, responses) if batched else [
        scorer.score(r, p, y) for r, p, y in zip(rubrics, prompts, responses)]
    return torch.tensor(values, dtype=torch.float64)


def pair_scores(scorer: PairScorer, pairs: Sequence[Example], rubric: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """``(s_chosen, s_rejected)`` ``[N]`` of the items, each conditioned on its rubric (``rubric=False``: none)."""
    rubrics = [e.columns.get("user_rubric") if rubric else None for e in pairs]
    scores = _scores(scorer, rubrics + rubrics, *both_sides(list(pairs)))
    return scores[: len(pairs)], scores[len(pairs):]


def accuracy_summary(outcomes: np.ndarray, resamples: int = RESAMPLES, seed: int = 0) -> dict[str, Any]:
    """``accuracy`` (mean outcome), its 95 % bootstrap ``ci`` and ``n``."""
    interval = bootstrap_ci(outcomes, resamples=resamples, seed=seed)
    return {"accuracy": interval.mean, "ci": [interval.low, interval.high], "n": len(outcomes)}


def outcomes_report(chosen: torch.Tensor, rejected: torch.Tensor, domains: Sequence[str], ties: float = 0.0,
                    resamples: int = RESAMPLES, seed: int = 0) -> dict[str, Any]:
    """Accuracy with interval overall and ``per_domain``, and ``nan_items``, of scored pairs."""
    outcomes = pair_outcomes(chosen, rejected, ties).numpy()
    names = np.asarray(domains, dtype=object)
    return {**accuracy_summary(outcomes, resamples, seed),
            "nan_items": int((chosen.isnan() | rejected.isnan()).sum()),
            "per_domain": {d: accuracy_summary(outcomes[names == d], resamples, seed) for d in sorted(set(domains))}}


def evaluate_scorer(scorer: PairScorer, pairs: Sequence[Example], ties: float = 0.0, resamples: int = RESAMPLES,
                    seed: int = 0) -> dict[str, Any]:
    """The harness's report of one scorer (see the module docstring); ``no_rubric`` is None when no item has a
    rubric."""
    if not pairs:
        raise ConfigError("no pairs to evaluate")
    if resamples < 1:
        raise ConfigError(f"resamples={resamples}: expected at least 1 bootstrap resample")
    if not 0 <= ties <= 1:
        raise ConfigError(f"ties={ties}: expected the credit of a tie, 0 (strict) to 1 (0.5: half)")
    domains = [str(e.columns.get("domain") or NO_DOMAIN) for e in pairs]
    report = {"template": getattr(scorer, "template", None), "ties": ties, "resamples": resamples, "seed": seed,
              **outcomes_report(*pair_scores(scorer, pairs), domains, ties, resamples, seed), "no_rubric": None}
    if any(e.columns.get("user_rubric") for e in pairs):
        control = outcomes_report(*pair_scores(scorer, pairs, rubric=False), domains, ties, resamples, seed)
        report["no_rubric"] = {**control, "drop": report["accuracy"] - control["accuracy"]}
    return report


def downstream_validity(accuracies: Sequence[float], downstream: Mapping[str, Sequence[float]]) -> dict[str, dict]:
    """Per downstream measure (one score per reward model, in the order of ``accuracies``): the ``pearson`` and
    ``spearman`` correlation with the accuracies, from 3 reward models on. Over 2 a correlation is ±1 by
    construction (two points lie on a line), so both are None and ``same_order`` says whether the more accurate
    reward model also scores higher downstream (None on a tie)."""
    out = {}
    for name, values in downstream.items():
        if len(values) != len(accuracies) or len(values) < 2:
            raise ConfigError(f"downstream {name!r}: {len(values)} values for {len(accuracies)} reward models; "
                              f"expected one per reward model, and at least 2 reward models")
        if len(values) == 2:
            product = (accuracies[1] - accuracies[0]) * (values[1] - values[0])
            out[name] = {"pearson": None, "spearman": None, "same_order": None if product == 0 else product > 0}
        else:
            out[name] = {"pearson": pearson(accuracies, values), "spearman": spearman(accuracies, values)}
    return out


def evaluate_reward_models(pairs_path: str | Path, rm_paths: Sequence[str | Path], *, ties: float = 0.0,
                           template: str = RUBRIC_TEMPLATE, downstream: Mapping[str, Sequence[float]] | None = None,
                           resamples: int = RESAMPLES, seed: int = 0, batch_size: int = 64, device: str = "cpu",
                           log: Callable[[str], Any] = print) -> dict[str, Any]:
    """``polo rm-eval``: every reward model folder of ``rm_paths`` on the pairs of ``pairs_path``, and the
    downstream correlations across them."""
    check_template(template)
    if len(set(map(str, rm_paths))) != len(rm_paths):
        raise ConfigError(f"reward models {[str(p) for p in rm_paths]}: each may be given once")
    pairs = read_pairs(pairs_path)
    log(f"{len(pairs)} pairs from {pairs_path}; rubric template {template!r}; ties count {ties}")
    reports = {}
    for path in rm_paths:
        report = evaluate_scorer(RewardModelScorer(RewardModel.load(path, device=device), template, batch_size),
                                 pairs, ties, resamples, seed)
        reports[str(path)] = report
        for line in summary_lines(str(path), report):
            log(line)
    accuracies = [r["accuracy"] for r in reports.values()]
    return {"pairs": str(pairs_path), "template": template, "ties": ties, "reward_models": reports,
            "downstream": downstream_validity(accuracies, downstream) if downstream else None}


def summary_lines(name: str, report: Mapping[str, Any]) -> list[str]:
    """Human-readable lines of one report: accuracy with interval, the control, each domain."""
    def acc(r: Mapping[str, Any]) -> str:
        return f"{r['accuracy']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}] (n={r['n']})"

    lines = [f"{name}: accuracy {acc(report)}" + (f", {report['nan_items']} item(s) with a NaN score"
                                                   if report["nan_items"] else "")]
    if report["no_rubric"] is not None:
        lines.append(f"  no-rubric control: {acc(report['no_rubric'])}, drop {report['no_rubric']['drop']:+.3f}")
    lines += [f"  {domain}: {acc(r)}" for domain, r in report["per_domain"].items()]
    return lines
