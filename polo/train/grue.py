"""``polo eval RUN --grue``: the GRUE evaluation (``polo.evaluation.grue.EvalSuite``) of a run's checkpoint.

The policy is the run's newest checkpoint that verifies, or ``checkpoints/step_N`` (``step``); ``step=0`` is
the run's starting model (its ``model.path`` or its warm start), the "before" of a before/after comparison.
Naturalness is measured under the run's starting model unless ``reference_path`` names another local checkpoint
(a causal LM; it may use another tokenizer). The result is written atomically to ``RUN/grue.json``
(``RUN/grue_step_N.json`` for an explicit step): the three groups ``task``, ``naturalness`` and
``diversity`` as ``{metric: value}``, each metric's ``higher_is_better``, and what was evaluated (the diversity
``unit`` among it: words, or characters for answers written without spaces).

Runs whose task has no reward functions (the episodes of a multi-turn environment, scored by the engine) are
refused with a message: GRUE scores single completions with reward functions.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from polo.core.diversity import Unit
from polo.core.registry import ConfigError
from polo.policy.kinds import policy_class
from polo.policy.policy import Policy
from polo.evaluation.grue import KINDS, EvalSuite
from polo.tasks.base import Task
from polo.tasks.rewards import RewardSpec
from polo.train.config import Recipe
from polo.train.export import checkpoint_policy
from polo.train.files import write_text_atomic
from polo.train.samples import render_table
from polo.train.trainer import max_new_tokens
from polo.train.warm_start import ensure_warm_start


def starting_model(recipe: Recipe, task: Task, log: Callable[[str], Any]) -> Path:
    """The folder of the run's starting model: ``model.path``, or its (cached, else rebuilt) warm start."""
    return Path(recipe.model.path) if recipe.model.path is not None else ensure_warm_start(recipe, task, log)


def run_policy(run: Path, recipe: Recipe, task: Task, step: int | None = None,
               log: Callable[[str], Any] = print) -> tuple[Policy, str]:
    """The run's policy at checkpoint ``step`` (default: the newest that verifies; 0: its starting model) and
    where it came from."""
    if step == 0:
        start = starting_model(recipe, task, log)
        return policy_class(recipe.model.kind).load(start, chat_template=recipe.model.chat_template), \
            f"starting model {start}"
    policy, ckpt = checkpoint_policy(run, recipe, step, log)
    return policy, str(ckpt)


def grue_evaluate(run: Path, recipe: Recipe, task: Task, *, step: int | None = None, size: int | None = None,
                  samples: int = 4, seed: int | None = None, reference_path: str | None = None,
                  unit: Unit = "words", log: Callable[[str], Any] = print) -> dict[str, Any]:
    """Evaluate the run's checkpoint (see the module docstring), write the result file and return the result."""
    specs = [RewardSpec.of(s) for s in recipe.rewards or task.default_rewards]
    if not specs:
        raise ConfigError(f"polo eval --grue scores single completions with the task's reward functions, and task "
                          f"{recipe.task['name']!r} has none (its episodes are scored by the run's engine): use "
                          f"polo eval {run} for its held-out success rate")
    if size is not None and size < 1:
        raise ConfigError(f"--size must be at least 1, got {size}")
    if step is not None and step < 0:
        raise ConfigError(f"--step must be 0 (the starting model) or a checkpoint's step, got {step}")
    policy, source = run_policy(run, recipe, task, step, log)
    ref_path = Path(reference_path) if reference_path else starting_model(recipe, task, log)
    ref_class = Policy if reference_path else policy_class(recipe.model.kind)  # --reference: any local causal LM
    ref = ref_class.load(ref_path, chat_template=recipe.model.chat_template).eval().requires_grad_(False)
    seed = recipe.seed if seed is None else seed
    suite = EvalSuite(task, specs, ref, max_new_tokens(recipe, task), samples=samples,
                      temperature=recipe.rollout.temperature, seed=seed, unit=unit)
    examples = task.examples("test", size or recipe.train.eval_size, seed=recipe.seed)
    measured = suite.evaluate(policy, examples)
    metrics = suite.metrics()
    result: dict[str, Any] = {"run": str(run), "policy": source, "reference_lm": str(ref_path), "examples": len(examples),
                              "samples_per_prompt": samples, "seed": seed, "diversity_unit": unit}
    result.update({kind: {m.name: measured[m.name] for m in metrics if m.kind == kind} for kind in KINDS})
    result["higher_is_better"] = {m.name: m.higher_is_better for m in metrics}
    name = "grue.json" if step is None else f"grue_step_{step}.json"
    write_text_atomic(run / name, json.dumps(result, indent=2) + "\n")
    result["file"] = str(run / name)
    return result


def grue_table(result: dict[str, Any]) -> str:
    """The three groups of ``result`` as one plain-text table: group, metric, value, better direction."""
    arrows = {True: "higher", False: "lower", None: ""}
    rows = [{"group": kind, "metric": name, "value": "n/a" if value is None else f"{value:.4f}",
             "better": arrows[result["higher_is_better"][name]]}
            for kind in KINDS for name, value in result[kind].items()]
    header = (f"GRUE: {result['policy']}\n  {result['examples']} held-out prompts x {result['samples_per_prompt']} "
              f"samples (seed {result['seed']}); perplexity under {result['reference_lm']}; diversity in "
              f"{result['diversity_unit']}")
    return f"{header}\n{render_table(rows, '')}"
