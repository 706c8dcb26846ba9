"""What ``polo train``, ``polo eval`` and ``polo config`` do with a language-model recipe or run (the ``lm`` entry
of polo.kinds.RUN_KINDS). ``ui`` is the command line's ``polo.kinds.Ui``: its log, progress bar and console."""
from __future__ import annotations

import json
import os
from pathlib import Path


def progress_info(row: dict) -> tuple[str, bool]:
    """The progress bar's text for a metrics row, and whether the row holds an evaluation."""
    info = f"reward {row['reward/total']:.3f}  acc {row['train/accuracy']:.3f}"
    if "eval/greedy_accuracy" in row:
        return info + f"  eval {row['eval/greedy_accuracy']:.3f}", True
    return info, False


def report(rows: list[dict], run_dir: Path, log) -> int:
    """Log the held-out greedy accuracy of the first and last evaluation; 0 (the exit status)."""
    evals = [r for r in rows if "eval/greedy_accuracy" in r]
    log(f"held-out greedy accuracy: {evals[0]['eval/greedy_accuracy']:.3f} (step {evals[0]['step']}) -> "
        f"{evals[-1]['eval/greedy_accuracy']:.3f} (step {evals[-1]['step']}); curves: {run_dir / 'curves.png'}")
    return 0


def train(args, ui) -> int:
    """``polo train RECIPE`` / ``polo train --resume RUN``: in this process, on Ray learners, or as one rank of
    torchrun's."""
    from polo.core.registry import ConfigError
    from polo.train.config import default_run_dir, load_recipe, load_run_config, with_plugins
    from polo.train.ray_learners import train_on_ray
    from polo.train.trainer import Trainer, resume

    on_ray = "WORLD_SIZE" not in os.environ  # under torchrun, torchrun's ranks are the learners
    if args.resume:
        extra = [args.recipe] if args.recipe else []
        if any("=" not in e for e in extra) or args.run_dir:
            raise ConfigError("polo train --resume RUN takes no recipe and no --run-dir: the run's config.yaml is "
                              "its recipe (only train.steps=N and train.max_minutes=M may extend it)")
        overrides = [*extra, *args.overrides]
        recipe = load_run_config(Path(args.resume), overrides)
        if on_ray and recipe.dist.learners > 1:
            return report(train_on_ray(recipe, Path(args.resume), resume_overrides=overrides), Path(args.resume),
                          ui.log)
        trainer = resume(Path(args.resume), ui.log, overrides)
    else:
        if not args.recipe:
            raise SystemExit("polo train: give a RECIPE or --resume RUN")
        recipe = with_plugins(load_recipe(args.recipe, args.overrides), args.plugin)
        run_dir = Path(args.run_dir) if args.run_dir else default_run_dir(recipe)
        if run_dir.exists() and not run_dir.is_dir():
            raise ConfigError(f"--run-dir {str(run_dir)!r} is a file, not a folder")
        if on_ray and recipe.dist.learners > 1:
            ui.log(f"run folder: {run_dir} ({recipe.dist.learners} data-parallel learners on Ray)")
            return report(train_on_ray(recipe, run_dir), run_dir, ui.log)
        trainer = Trainer(recipe, run_dir, ui.log)
    if not trainer.data_parallel.is_main:  # a data-parallel learner's other ranks: rank 0 reports
        trainer.run()
        return 0
    ui.log(f"run folder: {trainer.run_dir}")
    bar, update = ui.progress_bar(trainer.recipe.train.steps, trainer.step_count, progress_info)
    with bar:
        rows = trainer.run(update)
    return report(rows, trainer.run_dir, ui.log)


def plugin_hint(run: Path, err: Exception, plugins: list[str]) -> str:
    """For an unknown name in a run that recorded no plugin files: the hint that it probably needs one."""
    from polo.train.yaml_files import read_yaml_mapping

    if "; valid " not in str(err) or plugins or read_yaml_mapping(run / "config.yaml", "a run's config").get("plugins"):
        return ""
    return (f" ({run} recorded no plugin file: if it was trained with one, it probably needs "
            f"polo --plugin FILE eval {run})")


def evaluate(args, ui) -> int:
    """``polo eval RUN``: greedy and sampled held-out accuracy of the last checkpoint (``--grue``: the GRUE
    evaluation; ``--show N``: N completions as a table)."""
    from polo.core.registry import ConfigError
    from polo.engines.accuracy import accuracy
    from polo.tasks import build_task
    from polo.train.config import load_recipe
    from polo.train.export import checkpoint_policy
    from polo.train.trainer import max_new_tokens, set_threads

    run = Path(args.run)
    if args.size is not None and args.size < 1:
        raise ConfigError(f"--size must be at least 1, got {args.size}")
    if args.show < 0:
        raise ConfigError(f"--show must be 0 or more, got {args.show}")
    if not args.grue and any(v is not None for v in (args.samples, args.seed, args.reference, args.step, args.unit)):
        raise ConfigError("--samples, --seed, --reference, --step and --unit belong to polo eval --grue")
    try:
        recipe = load_recipe(run / "config.yaml")
        task = build_task(recipe.task)
    except ConfigError as err:
        raise ConfigError(f"{err}{plugin_hint(run, err, args.plugin)}") from None
    set_threads(recipe)
    if args.grue:
        from polo.train.grue import grue_evaluate, grue_table

        result = grue_evaluate(run, recipe, task, step=args.step, size=args.size, seed=args.seed,
                               samples=4 if args.samples is None else args.samples, reference_path=args.reference,
                               unit=args.unit or "words", log=ui.log)
        print(grue_table(result))
        ui.log(f"GRUE result: {result['file']}")
        return 0
    policy, ckpt = checkpoint_policy(run, recipe, log=ui.log)  # the checkpoint holds every weight: no warm start
    test = task.examples("test", args.size or recipe.train.eval_size, seed=recipe.seed)
    n_new = max_new_tokens(recipe, task)
    result = {
        "checkpoint": str(ckpt),
        "examples": len(test),
        "greedy_accuracy": accuracy(policy, task, test, n_new, greedy=True),
        "sampled_accuracy": accuracy(policy, task, test, n_new, greedy=False,
                                     temperature=recipe.rollout.temperature, seed=recipe.seed),
    }
    print(json.dumps(result, indent=2))
    if args.show:
        show_completions(policy, task, test[: args.show], n_new, ui.console)
    return 0


def show_completions(policy, task, examples, max_new: int, console) -> None:
    """A table on ``console`` (stderr, beside the log) of ``examples`` with their greedy completions and verdicts."""
    from rich.markup import escape

    from polo.engines.accuracy import completions
    from polo.train.samples import render_table

    rows = [{"prompt": e.prompt, "greedy completion": text, "answer": e.answer, "correct": task.is_correct(text, e)}
            for e, text in zip(examples, completions(policy, examples, max_new))]
    console.print(escape(render_table(rows, f"{len(rows)} test problems")), highlight=False)


def config_text(recipe: str | None, overrides: list[str]) -> str:
    """``polo config [RECIPE]``: every key of the resolved recipe (the defaults when none is named)."""
    from polo.config_reference import resolved_text
    from polo.train.config import load_recipe

    return resolved_text(load_recipe(recipe or {}, overrides)) + "\n"
