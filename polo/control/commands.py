"""What ``polo train``, ``polo eval`` and ``polo config`` do with a control recipe or run (the ``control`` entry of
polo.kinds.RUN_KINDS). ``ui`` is the command line's ``polo.kinds.Ui``: its log and progress bar."""
from __future__ import annotations

import json
from pathlib import Path

from polo.control.recipe import dump_tree, load_control_recipe, load_control_run_config
from polo.control.trainer import ControlTrainer, resume_control
from polo.core.registry import ConfigError
from polo.train.checkpoint import latest_checkpoint


def train(args, ui) -> int:
    """``polo train RECIPE`` of a control recipe or ``polo train --resume RUN`` of a control run, with a progress
    bar; logs the headline metric's first and last evaluation."""
    if args.resume:
        extra = [args.recipe] if args.recipe else []
        if any("=" not in e for e in extra) or args.run_dir:
            raise ConfigError("polo train --resume RUN takes no recipe and no --run-dir")
        trainer = resume_control(Path(args.resume), ui.log, [*extra, *args.overrides])
    else:
        trainer = ControlTrainer(load_control_recipe(args.recipe, args.overrides), args.run_dir, ui.log)
    ui.log(f"run folder: {trainer.run_dir}")
    headline = trainer.headline

    def describe(row: dict) -> tuple[str, bool]:
        info = "  ".join(f"{k.split('/')[-1]} {row[k]:.3f}" for k in ("train/episode_return",) if k in row)
        if headline in row:
            return f"{info}  {headline} {row[headline]:.3f}", True
        return info, False

    bar, update = ui.progress_bar(trainer.method.iterations, trainer.iteration, describe)
    with bar:
        rows = trainer.run(update)
    evals = [r for r in rows if headline in r]
    ui.log(f"{headline}: {evals[0][headline]:.3f} (iteration {evals[0]['step']}) -> {evals[-1][headline]:.3f} "
           f"(iteration {evals[-1]['step']}); curves: {trainer.run_dir / 'curves.png'}")
    return 0


def evaluate(args, ui) -> int:
    """``polo eval RUN`` of a control run: its method's evaluation of the last checkpoint (deterministic policy),
    printed as JSON."""
    run = Path(args.run)
    if args.grue:
        raise ConfigError(f"{run} is a control run: polo eval --grue evaluates language-model runs")
    ckpt = latest_checkpoint(run)
    if ckpt is None:
        raise ConfigError(f"{run} has no checkpoint that verifies")
    trainer = ControlTrainer(load_control_run_config(run), run, log=lambda m: None)
    trainer.restore(ckpt)
    print(json.dumps({"checkpoint": str(ckpt), "iteration": trainer.iteration, **trainer.method.evaluate()}, indent=2))
    return 0


def config_text(recipe: str, overrides: list[str]) -> str:
    """``polo config RECIPE`` of a control recipe: every setting, defaults filled in (docs/config.md describes
    them)."""
    return dump_tree(load_control_recipe(recipe, overrides).tree())
