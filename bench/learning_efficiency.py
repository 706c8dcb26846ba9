"""Wall-clock from the warm start to +15 points of held-out greedy accuracy: polo's `grpo` vs TRL's GRPOTrainer.

For each seed both trainers start from the same folder (polo's warm-started built-in model, default recipe,
that seed), train on the same prompts (the addition task's 5,000-problem training pool in polo's order for
that seed) with the same rewards (``correct`` 1.0 + ``digit_match`` 0.5) and are scored by the same code:
``polo.engines.accuracy.accuracy`` (greedy, the seed's 500 test problems) on a polo ``Policy`` built from that
folder into which the trainer's current weights are loaded. Evaluations come every ``EVAL_PROMPTS`` training
prompts; the clock is training only (evaluation excluded on both sides) until the first evaluation at or
above warm start + 0.15.

polo runs ``polo train grpo`` as shipped (``Trainer(load_recipe("grpo", ...)).run()``, only ``eval_every``
set). TRL runs a sweep of settings (``TRL_SETTINGS``) on seed 0; the fastest to reach the target is then run on
every seed next to polo (and polo at that setting's batch, minibatching and lr, where polo has them). The
headline is the median over seeds of TRL seconds / polo seconds. A run that has not reached the target after
``--limit`` training seconds (checked at evaluations) stops there.

Other tasks, models and recipes (the issue #14 ladder): ``--task NAME,KEY=VALUE,...`` (the task and its knobs,
for both frameworks), ``--recipe`` (polo's recipe, default ``grpo``), ``--set KEY=VALUE ...`` (polo overrides for
the warm start and every polo run: model size, context length, warm-start steps; the warm-start folder, and so
TRL's model, follows them), ``--trl NAME ...`` (the TRL settings to sweep). TRL's completion cap is polo's
(``rollout.max_new_tokens``, or the task's ``max_completion_chars`` + 1).

    pip install -e '.[bench]' && python bench/learning_efficiency.py [--quick] [--limit SECONDS] \
        [--task addition_trace,digits=3] [--recipe grpo] [--set model.tiny.preset=base ...] [--trl NAME ...]
"""
from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from common import ADDITION, median, parse_args, parse_task, print_table, prompt_order, reward_functions, \
    task_overrides

import torch  # noqa: E402  (common sets the offline and thread environment first)

from polo.policy.policy import Policy  # noqa: E402
from polo.tasks import build_task  # noqa: E402
from polo.train.config import load_recipe  # noqa: E402
from polo.engines.accuracy import accuracy  # noqa: E402
from polo.train.trainer import Trainer, max_new_tokens  # noqa: E402
from polo.train.warm_start import ensure_warm_start  # noqa: E402

GAIN = 0.15
EVAL_PROMPTS = 64
"""Training prompts between two evaluations (polo: ``eval_every`` = 64 / prompts per step, at least 1)."""
SEEDS = (0, 1, 2)


# TRL: every run is one thread, CPU, no vLLM, in-memory dataset, no logging, completions capped at polo's cap
# (addition: 4 tokens, 3 digits + EOS). Each setting lists what it changes relative to TRL 1.16's GRPOConfig defaults.
TRL_FIXED = dict(temperature=1.0, num_generations=8, use_vllm=False, use_cpu=True,
                 bf16=False, report_to="none", logging_strategy="no", save_strategy="no", disable_tqdm=True,
                 dataloader_num_workers=0, shuffle_dataset=False)
TUNED = dict(lr_scheduler_type="constant", optim="adamw_torch", gradient_checkpointing=False, loss_type="grpo")
"""polo's loop: constant lr, plain AdamW, no activation recomputation, per-sequence token-mean loss."""


def tuned(prompts: int, lr: float, **extra) -> dict:
    """``prompts`` × 8 completions per optimizer step at constant ``lr``, plus ``extra`` GRPOConfig fields."""
    return dict(TUNED, per_device_train_batch_size=prompts * 8, learning_rate=lr, **extra)


TRL_SETTINGS = {
    "defaults (1x8/step, lr 1e-6 linear, dapo, grad ckpt)": {},
    "defaults at 64x8/step": dict(per_device_train_batch_size=64 * 8),
    "64x8, grpo, lr 1e-4": tuned(64, 1e-4),
    "64x8, grpo, lr 5e-4": tuned(64, 5e-4),
    "64x8, grpo, lr 1e-3": tuned(64, 1e-3),
    "64x8, dapo, lr 5e-4": tuned(64, 5e-4, loss_type="dapo"),
    "64x8, dr_grpo, lr 5e-4": tuned(64, 5e-4, loss_type="dr_grpo"),
    "64x8, grpo, lr 5e-4, scale_rewards batch": tuned(64, 5e-4, scale_rewards="batch"),
    "64x8, grpo, lr 5e-4, num_iterations 2": tuned(64, 5e-4, num_iterations=2),
    "32x8, grpo, lr 5e-4": tuned(32, 5e-4),
    "32x8, grpo, lr 1e-3": tuned(32, 1e-3),
    "16x8, grpo, lr 5e-4": tuned(16, 5e-4),
    "8x8, grpo, lr 3e-4": tuned(8, 3e-4),
    "16x8/step, 4 steps per generation (64x8), lr 5e-4": tuned(16, 5e-4, steps_per_generation=4),
    "16x8/step, 4 steps per generation (64x8), lr 1e-3": tuned(16, 1e-3, steps_per_generation=4),
    "32x8/step, 2 steps per generation (64x8), lr 5e-4": tuned(32, 5e-4, steps_per_generation=2),
    "32x8/step, 4 steps per generation (128x8), lr 5e-4": tuned(32, 5e-4, steps_per_generation=4),
    "8x8/step, 8 steps per generation (64x8), lr 5e-4": tuned(8, 5e-4, steps_per_generation=8),
}
QUICK_SETTINGS = ["defaults (1x8/step, lr 1e-6 linear, dapo, grad ckpt)", "32x8, grpo, lr 5e-4",
                  "16x8/step, 4 steps per generation (64x8), lr 5e-4"]


def polo_eval_every(prompts_per_step: int) -> str:
    return f"train.eval_every={max(1, EVAL_PROMPTS // prompts_per_step)}"


def polo_same(config: dict) -> list[str] | None:
    """polo overrides doing what a :func:`tuned` TRL setting does (None for a setting polo has no match for):
    P×8 rows per optimizer step and S steps per generation are polo's P·S prompts per step in S minibatches;
    constant lr, and no step cap before the time limit."""
    if set(config) - {*TUNED, "per_device_train_batch_size", "learning_rate", "steps_per_generation"} or any(
            config.get(k) != v for k, v in TUNED.items()):
        return None
    prompts, steps = config["per_device_train_batch_size"] // 8, config.get("steps_per_generation", 1)
    return [f"rollout.prompts_per_step={prompts * steps}", f"train.minibatches={steps}",
            f"optim.lr={config['learning_rate']}", "optim.schedule=constant", "train.steps=100000",
            polo_eval_every(prompts * steps)]


@dataclass
class Outcome:
    """Evaluations ``(step, training seconds, accuracy)`` of one run; reached = the first at/above target."""

    target: float
    evals: list[tuple[int, float, float]] = field(default_factory=list)

    @property
    def reached(self) -> tuple[int, float, float] | None:
        return next((e for e in self.evals if e[2] >= self.target - 1e-9), None)

    @property
    def seconds(self) -> float:
        return self.reached[1] if self.reached else float("nan")

    def summary(self) -> str:
        if self.reached:
            step, seconds, acc = self.reached
            return f"{seconds:.1f} s, step {step} ({acc:.3f})"
        step, seconds, acc = self.evals[-1]
        return f"not reached in {seconds:.0f} s / {step} steps (final accuracy {acc:.3f})"


@dataclass(frozen=True)
class Setup:
    """What both frameworks run: polo's recipe (a shipped name or path), the task (``{"name": ..., **knobs}``)
    and polo overrides shared by the warm start and every polo run."""

    recipe: str = "grpo"
    task: dict = field(default_factory=lambda: dict(ADDITION))
    overrides: tuple[str, ...] = ()


class Start:
    """One seed's starting point: the warm-start folder and polo's greedy held-out accuracy, the same for
    both trainers (the given model's weights are loaded into one polo Policy built from that folder)."""

    def __init__(self, seed: int, setup: Setup):
        self.seed, self.setup = seed, setup
        self.overrides = [f"seed={seed}", "train.threads=1", *task_overrides(setup.task), *setup.overrides]
        recipe = load_recipe(setup.recipe, self.overrides)
        self.pool_size = recipe.train.train_pool
        self.task = build_task(recipe.task)
        self.folder = ensure_warm_start(recipe, self.task)
        self.policy = Policy.load(self.folder)
        self.examples = self.task.examples("test", recipe.train.eval_size, seed=seed)
        self.max_new_tokens = max_new_tokens(recipe, self.task)
        self.prompts_per_step = recipe.rollout.prompts_per_step
        self.warm = self.evaluate(self.policy.model)
        self.target = self.warm + GAIN

    def evaluate(self, model: torch.nn.Module) -> float:
        self.policy.model.load_state_dict(model.state_dict())
        return accuracy(self.policy, self.task, self.examples, self.max_new_tokens, greedy=True)


class Stop(Exception):
    pass


def run_polo(start: Start, limit: float, overrides=()) -> Outcome:
    """``polo train grpo`` until the target; training seconds = ``elapsed_s`` minus the logged ``time/eval``."""
    recipe = load_recipe(start.setup.recipe, [*start.overrides, polo_eval_every(start.prompts_per_step), *overrides])
    trainer = Trainer(recipe, Path(tempfile.mkdtemp(prefix="polo-le-")), log=lambda *a: None)
    out, eval_s = Outcome(start.target), 0.0

    def progress(step: int, row: dict) -> None:
        nonlocal eval_s
        if "eval/greedy_accuracy" in row:
            eval_s += row["time/eval"]
            out.evals.append((step, row["elapsed_s"] - eval_s, row["eval/greedy_accuracy"]))
            if out.reached or out.evals[-1][1] >= limit:
                raise Stop

    try:
        trainer.run(progress)
    except Stop:
        pass
    # the trainer's own evaluation is polo's accuracy() too: check that it agrees with the shared evaluator
    first = trainer.metrics.read()[0]["eval/greedy_accuracy"]
    assert first == start.warm and out.evals[-1][2] == start.evaluate(trainer.policy.hf_model), "evaluations differ"
    return out


def trl_trainer(start: Start, config: dict):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    rewards, weights = reward_functions(start.setup.task)
    args = GRPOConfig(output_dir=tempfile.mkdtemp(prefix="trl-le-"), reward_weights=weights, seed=start.seed,
                      max_completion_length=start.max_new_tokens, **{**TRL_FIXED, **config})
    prompts_per_step = args.per_device_train_batch_size // args.num_generations
    # polo's stream: 20 shuffled passes over the default pool
    examples = prompt_order(100_000, start.seed, start.setup.task, start.pool_size)
    data = Dataset.from_dict({"prompt": [e.prompt for e in examples], "answer": [e.answer for e in examples]})
    args.max_steps = len(examples) // prompts_per_step
    model = AutoModelForCausalLM.from_pretrained(start.folder, dtype=torch.float32, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(start.folder, local_files_only=True)
    trainer = GRPOTrainer(model=model, reward_funcs=rewards, args=args, train_dataset=data, processing_class=tokenizer)
    trainer.remove_callback(PrinterCallback)
    return trainer, prompts_per_step


def check_prompt_encoding(start: Start) -> str:
    """TRL tokenizes plain-string prompts with the tokenizer's special tokens (bos), as polo does."""
    trainer, _ = trl_trainer(start, {})
    prompt = prompt_order(1, start.seed, start.setup.task, start.pool_size)[0].prompt
    trl_ids = trainer._tokenize_prompts([prompt])[0][0]
    polo_ids = start.policy.encode_prompts([prompt])[0][0].tolist()
    assert list(trl_ids) == polo_ids, (trl_ids, polo_ids)
    return f"prompt {prompt!r}: token ids {polo_ids} in polo and TRL"


def run_trl(start: Start, config: dict, limit: float) -> Outcome:
    """TRL with ``config`` until the target or ``limit`` training seconds; evaluation in a callback."""
    from transformers import TrainerCallback

    trainer, prompts_per_step = trl_trainer(start, config)
    every = max(1, EVAL_PROMPTS // prompts_per_step)
    out = Outcome(start.target)

    class Clock(TrainerCallback):  # the training clock runs from train begin and pauses while evaluating
        def on_train_begin(self, *args, **kwargs):
            self.trained, self.since = 0.0, time.perf_counter()

        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step % every:
                return
            self.trained += time.perf_counter() - self.since
            out.evals.append((state.global_step, self.trained, start.evaluate(model)))
            control.should_training_stop = bool(out.reached) or self.trained >= limit
            self.since = time.perf_counter()

    trainer.add_callback(Clock())
    trainer.train()
    return out


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], limit=dict(
        type=float, default=None, help="training seconds per run before giving up (default 300; --quick 120)"),
        task=dict(default="addition", help="NAME,KEY=VALUE,...: the task and its knobs"),
        recipe=dict(default="grpo", help="polo's recipe"),
        set=dict(nargs="*", default=[], metavar="KEY=VALUE", help="polo overrides (model, context, warm start)"),
        trl=dict(nargs="+", default=None, choices=list(TRL_SETTINGS), metavar="NAME", help="TRL settings to sweep"))
    limit = args.limit or (120.0 if args.quick else 300.0)
    names, seeds = (QUICK_SETTINGS, SEEDS[:1]) if args.quick else (list(TRL_SETTINGS), SEEDS)
    names = args.trl or names
    setup = Setup(args.recipe, parse_task(args.task), tuple(args.set))
    print(f"recipe {setup.recipe}, task {setup.task}, polo overrides {list(setup.overrides)}")
    starts = {seed: Start(seed, setup) for seed in seeds}
    first = starts[seeds[0]]
    for s in starts.values():
        print(f"seed {s.seed}: warm start {s.folder}, greedy accuracy {s.warm:.3f}, target {s.target:.3f}")
    print(check_prompt_encoding(first))

    polo = {first.seed: run_polo(first, limit)}
    print(f"  polo grpo, seed {first.seed}: {polo[first.seed].summary()}", flush=True)
    sweep = {}
    for name in names:
        sweep[name] = run_trl(first, TRL_SETTINGS[name], limit)
        print(f"  TRL {name}: {sweep[name].summary()}", flush=True)
    print_table(f"TRL settings, seed {first.seed} (one run each; polo grpo: {polo[first.seed].summary()})",
                ["TRL setting", "outcome: training s to +15 points", "s / optimizer step", "prompts"],
                [[n, o.summary(), o.evals[-1][1] / o.evals[-1][0],
                  (o.reached or o.evals[-1])[0] * TRL_SETTINGS[n].get("per_device_train_batch_size", 8) // 8]
                 for n, o in sweep.items()])

    reached = [n for n in names if sweep[n].reached]
    if not reached:
        print("\nno TRL setting reached the target")
        return
    best = min(reached, key=lambda n: sweep[n].seconds)
    same = polo_same(TRL_SETTINGS[best])
    trl, polo_same_runs = {first.seed: sweep[best]}, {}
    for seed, start in starts.items():  # every seed: polo as shipped, TRL's best, polo at TRL's setting
        if seed != first.seed:
            polo[seed] = run_polo(start, limit)
            trl[seed] = run_trl(start, TRL_SETTINGS[best], limit)
        if same:
            polo_same_runs[seed] = run_polo(start, limit, same)
        print(f"  seed {seed}: polo {polo[seed].summary()}; TRL {trl[seed].summary()}"
              + (f"; polo at {best!r}: {polo_same_runs[seed].summary()}" if same else ""), flush=True)

    def cells(outcome: Outcome) -> list:  # training seconds and steps to the target
        return [outcome.seconds, outcome.reached[0] if outcome.reached else "-"]

    header = ["seed", "start", "polo grpo s", "steps", "TRL s", "steps", "TRL / polo"]
    header += ["polo at the TRL setting s", "steps", "TRL / that"] if same else []
    rows = []
    for seed, start in starts.items():
        p, t = cells(polo[seed]), cells(trl[seed])
        rows.append([seed, start.warm, *p, *t, t[0] / p[0]])
        if same:
            q = cells(polo_same_runs[seed])
            rows[-1] += [*q, t[0] / q[0]]
    rows.append(["median", "", *(median([r[i] for r in rows]) if isinstance(rows[0][i], float) else ""
                                 for i in range(2, len(header)))])
    print_table(f"Training seconds from the warm start to +{GAIN:.2f}: polo grpo vs TRL '{best}'", header, rows)
    print("\ntarget: TRL / polo >= 3")


if __name__ == "__main__":
    main()
