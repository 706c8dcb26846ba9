"""Command line: ``polo train | sft | pairs | eval | rm | rm-eval | export | arena | arena-claims | list | config``."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from rich.console import Console

console = Console(stderr=True)


def _log(msg: str) -> None:
    console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {msg}")


def _progress_bar(total: int, start: int, describe):
    """The training's progress bar (polo.train.progress) and its ``update(step, row)``; ``describe(row)`` → (text,
    whether it is an evaluation row, which is also logged when the console is not a terminal)."""
    from polo.train.progress import progress_bar

    bar, advance = progress_bar("train", total, start, console)

    def update(step: int, row: dict) -> None:
        info, evaluated = describe(row)
        if evaluated and not console.is_terminal:
            _log(f"step {step}: {info}")
        advance(step, info)

    return bar, update


def _ui():
    """The log, progress bar and console a kind's commands print with (polo.kinds.Ui)."""
    from polo.kinds import Ui

    return Ui(_log, _progress_bar, console)


def cmd_train(args) -> int:
    from polo.kinds import recipe_kind, run_kind

    kind = run_kind(Path(args.resume)) if args.resume else recipe_kind(args.recipe)
    return kind.train(args, _ui())


def cmd_sft(args) -> int:
    from polo.tasks import build_task
    from polo.train.config import load_recipe
    from polo.engines.accuracy import accuracy
    from polo.train.trainer import load_policy, max_new_tokens, set_threads

    recipe = load_recipe(args.recipe, args.overrides)
    set_threads(recipe)
    if recipe.model.path:
        raise SystemExit("polo sft warm-starts the built-in model; this recipe sets model.path")
    task = build_task(recipe.task)
    test = task.examples("test", recipe.train.eval_size, seed=recipe.seed)
    policy = load_policy(recipe, task, test, _log)
    acc = accuracy(policy, task, test, max_new_tokens(recipe, task))
    _log(f"warm-started model greedy accuracy on {len(test)} test problems: {acc:.3f}")
    return 0


def cmd_pairs(args) -> int:
    import torch

    from polo.core.registry import ConfigError
    from polo.engines.pair_builder import build_pairs
    from polo.tasks import build_task
    from polo.train.config import load_recipe
    from polo.train.files import write_text_atomic
    from polo.train.trainer import load_policy, max_new_tokens, set_threads

    if args.prompts < 1 or args.samples < 2:
        raise ConfigError(f"--prompts must be at least 1 and --samples at least 2, got {args.prompts} and "
                          f"{args.samples}")
    recipe = load_recipe({"task": {"name": args.task}}, args.overrides)
    set_threads(recipe)
    task = build_task(recipe.task)
    examples = task.examples("train", args.prompts, seed=recipe.seed)
    policy = load_policy(recipe, task, examples, _log)
    rows = build_pairs(policy, task, examples, args.samples, max_new_tokens(recipe, task),
                       torch.Generator().manual_seed(recipe.seed), recipe.rollout.temperature)
    write_text_atomic(Path(args.out), "".join(json.dumps(row) + "\n" for row in rows))
    _log(f"{len(rows)} pairs (a verified-correct and an incorrect completion) from {len(examples)} prompts x "
         f"{args.samples} samples -> {args.out}; train on them with: polo train dpo task.path={args.out} "
         f"task.verifier={args.task}")
    return 0


def cmd_eval(args) -> int:
    from polo.core.registry import ConfigError
    from polo.kinds import run_kind

    run = Path(args.run)
    if not (run / "config.yaml").is_file():
        raise ConfigError(f"{run} is not a run folder (no config.yaml)")
    return run_kind(run).evaluate(args, _ui())


def cmd_rm(args) -> int:
    from polo.train.reward_model import load_settings, train_reward_model

    flags = {k: v for k, v in (("model", args.model), ("epochs", args.epochs)) if v is not None}
    result = train_reward_model(args.pairs, args.out, load_settings(args.overrides, **flags), args.eval_pairs, _log)
    print(json.dumps(result, indent=2))
    return 0


def _downstream(specs: list[str]) -> dict[str, list[float]]:
    """``--downstream NAME=V1,V2,...`` flags as ``{NAME: [V1, V2, ...]}``."""
    from polo.core.registry import ConfigError

    out = {}
    for spec in specs:
        name, _, values = spec.partition("=")
        try:
            out[name] = [float(v) for v in values.split(",")]
        except ValueError:
            raise ConfigError(f"--downstream {spec!r}: expected NAME=V1,V2,... with one number per --rm") from None
    return out


def cmd_rm_eval(args) -> int:
    from polo.arena.pair_eval import RUBRIC_TEMPLATE, evaluate_reward_models

    result = evaluate_reward_models(args.pairs, args.rm, ties={"strict": 0.0, "half": 0.5}[args.ties],
                                    template=args.template or RUBRIC_TEMPLATE, downstream=_downstream(args.downstream),
                                    resamples=args.resamples, seed=args.seed, batch_size=args.batch_size,
                                    device=args.device, log=_log)
    for name, corr in (result["downstream"] or {}).items():
        if corr["pearson"] is None:  # 2 reward models: their order, not a correlation (±1 by construction)
            order = {True: "agrees with", False: "is opposite to", None: "ties in"}[corr["same_order"]]
            _log(f"downstream {name}: over 2 reward models its order {order} their accuracies' (a correlation would "
                 f"be ±1 by construction; give 3 or more --rm for one)")
        else:
            _log(f"downstream {name}: Pearson {corr['pearson']:.4f}, Spearman {corr['spearman']:.4f}")
    print(json.dumps(result, indent=2))
    return 0


def cmd_export(args) -> int:
    from polo.train.export import export_run

    export_run(Path(args.run), Path(args.out), step=args.step, merge_lora=args.merge_lora, log=_log)
    return 0


def cmd_arena(args) -> int:
    from polo.arena import load_arena, run_arena, write_report

    if args.workers is not None and args.workers < 1:
        raise SystemExit("polo arena: --workers must be at least 1")
    arena = load_arena(args.arena, args.overrides)
    out = Path(args.out or Path("runs") / "arena" / arena.file.name)
    workers = args.workers or arena.file.workers
    command = " ".join(["polo", *[f"--plugin {p}" for p in args.plugin], "arena", args.arena,
                        *([f"--workers {args.workers}"] if args.workers else []),
                        *([f"--out {args.out}"] if args.out else []), *args.overrides,
                        *(["--report-only"] if args.report_only else [])])
    status = {}
    if not args.report_only:
        try:
            status = run_arena(arena, out, workers, args.plugin, _log)
        except RuntimeError as err:
            console.print(f"[red]error:[/red] {err}")
            return 1
    report = write_report(arena, out, command)
    _log(f"report: {out / 'report.md'} and {out / 'report.html'}")
    for claim in report.claims:
        _log(f"claim {claim.claim.id}: {claim.verdict}")
    if report.missing:
        _log(f"[red]{len(report.missing)} run(s) did not finish[/red]: {', '.join(report.missing)}")
    return 1 if report.missing or any(status.values()) else 0


def cmd_arena_claims(args) -> int:
    from polo.arena.claims_gather import gather_markdown

    text = gather_markdown(args.folders)
    if args.out:
        Path(args.out).write_text(text)
        _log(f"claims of {len(args.folders)} arena(s): {args.out}")
    else:
        print(text, end="")
    return 0


def cmd_list(args) -> int:
    from polo.catalog import catalog_text

    print(catalog_text())
    return 0


def cmd_config(args) -> int:
    from polo.kinds import recipe_kind

    recipe, overrides = args.recipe, list(args.overrides)
    if recipe and "=" in recipe:  # `polo config optim.lr=1e-3`: overrides of the defaults
        recipe, overrides = None, [recipe, *overrides]
    print(recipe_kind(recipe).config_text(recipe, overrides), end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="polo", description="Policy optimization for language models.")
    parser.add_argument("--plugin", action="append", default=[], metavar="FILE",
                        help="Python file that registers custom tasks / rewards / components")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("train", help="train a policy with a recipe",
                       epilog="Every key with its type, default and meaning: docs/config.md; `polo config RECIPE "
                              "[overrides]` prints a recipe's resolved keys.")
    p.add_argument("recipe", nargs="?", help="recipe YAML path or shipped recipe name (e.g. grpo)")
    p.add_argument("overrides", nargs="*", help="key.sub=value overrides")
    p.add_argument("--run-dir", help="run folder (default: runs/<name>_s<seed>_<time>)")
    p.add_argument("--resume", metavar="RUN", help="continue a killed run from its last checkpoint")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("sft", help="warm-start the built-in model on the task's demonstrations")
    p.add_argument("recipe")
    p.add_argument("overrides", nargs="*")
    p.set_defaults(func=cmd_sft)

    p = sub.add_parser("pairs", help="preference pairs from the task's verifier: a correct and an incorrect sample "
                                     "per prompt, as JSONL for task preference_pairs")
    p.add_argument("task", help="task name (e.g. addition); its knobs as overrides (task.digits=3)")
    p.add_argument("overrides", nargs="*", help="key.sub=value overrides (model.path=FOLDER samples from a checkpoint "
                                                "instead of the warm-started built-in model)")
    p.add_argument("--out", required=True, help="JSONL file to write")
    p.add_argument("--prompts", type=int, default=500, help="training-split prompts to sample (default 500)")
    p.add_argument("--samples", type=int, default=8, help="completions sampled per prompt (default 8)")
    p.set_defaults(func=cmd_pairs)

    p = sub.add_parser("eval", help="greedy and sampled accuracy of a run's last checkpoint")
    p.add_argument("run")
    p.add_argument("--size", type=int, help="number of test problems")
    p.add_argument("--show", type=int, default=0, metavar="N",
                   help="also print N test problems with prompt, greedy completion, answer and correctness")
    p.add_argument("--grue", action="store_true", help="GRUE evaluation (RL4LMs): task score, naturalness "
                   "(perplexity under a reference LM) and diversity of held-out completions; writes RUN/grue.json")
    p.add_argument("--samples", type=int, help="--grue: sampled completions per prompt (default 4)")
    p.add_argument("--seed", type=int, help="--grue: seed of the sampled completions (default: the run's seed)")
    p.add_argument("--reference", metavar="PATH", help="--grue: local causal LM checkpoint scoring perplexity "
                   "(default: the run's starting model)")
    p.add_argument("--step", type=int, help="--grue: checkpoint step to evaluate, 0 = the starting model "
                   "(default: the newest checkpoint)")
    p.add_argument("--unit", choices=("words", "chars"), help="--grue: diversity n-grams over whitespace words "
                   "(default, as GEM) or characters (answers written without spaces)")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("rm", help="train a Bradley-Terry reward model on preference pairs (a Hugging Face "
                                  "sequence-classification folder)",
                       epilog="Settings as key=value: see polo.train.reward_model.RewardModelSettings and "
                              "docs/preference.md (e.g. lr=1e-5 batch_size=16 margin=1 tiny.hidden_size=64).")
    p.add_argument("pairs", help="JSONL file of {prompt, chosen, rejected[, chosen_score, rejected_score]}")
    p.add_argument("overrides", nargs="*", help="key=value settings")
    p.add_argument("--out", required=True, help="output folder (new, empty or a previous reward model)")
    p.add_argument("--model", help="local causal LM or reward model folder to start from (default: the built-in "
                                   "tiny architecture, freshly initialised)")
    p.add_argument("--epochs", type=int, help="passes over the training pairs (default 1)")
    p.add_argument("--eval-pairs", metavar="FILE", help="held-out pairs (default: eval_fraction of PAIRS by prompt hash)")
    p.set_defaults(func=cmd_rm)

    p = sub.add_parser("rm-eval", help="pairwise accuracy of reward models on preference pairs (Personalized "
                                       "RewardBench conventions: CI, per domain, no-rubric control)")
    p.add_argument("pairs", help="JSONL file of {prompt, chosen, rejected[, user_rubric, domain, id]}")
    p.add_argument("--rm", action="append", required=True, metavar="DIR",
                   help="reward model folder (repeat to compare several)")
    p.add_argument("--ties", choices=("strict", "half"), default="strict",
                   help="a tie counts 0 (strict, default) or 0.5 (half)")
    p.add_argument("--template", help="how the rubric is put ahead of the prompt, with {rubric} and {prompt} "
                                      "(default: polo.tasks.preferences.RUBRIC_TEMPLATE)")
    p.add_argument("--downstream", action="append", default=[], metavar="NAME=V1,V2,...",
                   help="a downstream score per --rm (in order): Pearson and Spearman with the accuracies")
    p.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples of the 95%% interval")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    p.add_argument("--batch-size", type=int, default=64, help="texts per forward")
    p.add_argument("--device", default="cpu", help="torch device of the reward models")
    p.set_defaults(func=cmd_rm_eval)

    p = sub.add_parser("export", help="write a run's checkpoint as a Hugging Face save_pretrained folder")
    p.add_argument("run")
    p.add_argument("out", help="output folder (new, empty or a previous export)")
    p.add_argument("--step", type=int, help="checkpoint step (default: the newest that verifies)")
    p.add_argument("--merge-lora", action="store_true", help="merge LoRA adapters into the weights")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("arena", help="compare recipes over seeds: train every pair, then write a report")
    p.add_argument("arena", help="arena YAML path or shipped arena name (e.g. default)")
    p.add_argument("overrides", nargs="*", help="key.sub=value overrides applied to every run")
    p.add_argument("--workers", type=int, help="parallel runs (default: the arena file's workers)")
    p.add_argument("--out", help="output folder (default: runs/arena/<name>); rerun to resume")
    p.add_argument("--report-only", action="store_true", help="only write the report of the finished runs")
    p.set_defaults(func=cmd_arena)

    p = sub.add_parser("arena-claims", help="the claims of several arena output folders (their summary.json) "
                                            "in one Markdown table")
    p.add_argument("folders", nargs="+", metavar="OUT", help="arena output folder (polo arena --out)")
    p.add_argument("--out", help="Markdown file to write (default: print)")
    p.set_defaults(func=cmd_arena_claims)

    p = sub.add_parser("list", help="every registered component and shipped recipe")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("config", help="every key of a recipe: its value, default and description (docs/config.md)")
    p.add_argument("recipe", nargs="?", help="recipe YAML path or shipped recipe name (default: all defaults)")
    p.add_argument("overrides", nargs="*", help="key.sub=value overrides")
    p.set_defaults(func=cmd_config)

    args, extra = parser.parse_known_args(argv)
    unknown = [e for e in extra if e.startswith("-") or "=" not in e or not hasattr(args, "overrides")]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if extra:
        args.overrides = list(args.overrides) + extra
    from polo.core.registry import ConfigError
    from polo.tasks import load_plugin
    from polo.tasks.rewards import RewardError
    from polo.train.checkpoint import CheckpointError
    from polo.train.lock import LockedError
    from polo.train.metrics import MetricsError
    from polo.train.trainer import NonFiniteError

    try:
        for plugin in args.plugin:
            load_plugin(plugin)
        code = args.func(args)
        sys.stdout.flush()  # a closed pipe (`polo list | head`) surfaces here, not at interpreter exit
        return code
    except BrokenPipeError:
        return _stdout_closed()
    except ConfigError as err:
        return _fail(err, 2)
    except (CheckpointError, NonFiniteError, LockedError, MetricsError, RewardError,
            FileNotFoundError) as err:
        return _fail(err, 1)


def _stdout_closed() -> int:
    """The reader of stdout went away (``polo list | head``): stop quietly with a SIGPIPE death's status, 141, as
    ``cat`` does."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # Python's own flush at exit must not fail again
    return 128 + 13


def _fail(err: Exception, code: int) -> int:
    """One line on stderr for an error the user can fix (``POLO_DEBUG=1``: the traceback instead)."""
    if os.environ.get("POLO_DEBUG"):
        raise err
    from rich.markup import escape

    console.print(f"[red]error:[/red] {escape(' '.join(str(err).split()))}", soft_wrap=True, highlight=False)
    return code

if __name__ == "__main__":
    sys.exit(main())
