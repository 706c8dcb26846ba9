"""One full GRPO step (sample → reward → advantage → update): polo's Trainer vs TRL's GRPOTrainer.

Identical work: polo's tiny model saved as a Hugging Face folder (EOS probability 1/24 per token, so lengths
vary), the addition task's prompts in polo's order and its two rewards, 8 generations per prompt, the same
completion cap, the GRPO loss (per-sequence token mean, PPO clip 0.2, no KL), AdamW (same lr), grad clip 1,
one optimizer step per step, no vLLM, one thread. Each round builds the trainers fresh from the folder,
runs warm-up + timed steps of polo, of polo without skipping zero-advantage rows (TRL trains them; their
gradient is 0), then of TRL; seconds per step are medians over the timed steps and the ratios are medians
over rounds of TRL / polo.

``--regime long``: the base model, 8-digit ``addition_trace`` prompts, 4 × 8 completions of ≤ 128 and ≤ 256
tokens (P(EOS) = 1/cap), polo without skipping only, TRL without gradient checkpointing (common.Regime).

Each step's model FLOPs are counted as it runs (bench/limit.py); ``/ limit`` columns are the fraction of the
machine's matmul throughput at the step's own GEMM shapes, measured in the same run, that the step achieved
(polo: also its sampling and update stages).

    pip install -e '.[bench]' && python bench/train_step.py [--quick] [--regime long]
"""
from __future__ import annotations

from functools import partial

from transformers import TrainerCallback

from common import REGIME_OPTION, REGIMES, median, parse_args, polo_trainer, print_table, save_model, timed, \
    trl_lengths, trl_trainer
from limit import FlopCounter, Work, achieved, describe, step_fractions


NO_SKIP = ("train.skip_zero_advantage_rows=false",)
"""polo doing TRL's update work: rows with all-zero advantages (groups of equal rewards) are trained too."""


def polo_steps(model_dir, setting, task, warmup: int, steps: int,
               extra=()) -> tuple[list[float], list[dict], list[Work]]:
    """Seconds, logged row and model FLOPs (Work) of each timed step."""
    trainer = polo_trainer(model_dir, setting, extra=extra, task=task)
    times, rows, works = [], [], []
    with FlopCounter(trainer.policy.hf_model) as counter:
        for _ in range(warmup + steps):
            seconds, row = timed(trainer.step)
            times.append(seconds)
            rows.append(row)
            works.append(counter.take())
    return times[warmup:], rows[warmup:], works[warmup:]


def trl_steps(model_dir, setting, regime, warmup: int, steps: int) -> tuple[list[float], list[float], list[Work]]:
    """Seconds, mean completion length and model FLOPs (Work) of each timed step."""
    trainer = trl_trainer(model_dir, setting, warmup + steps, task=regime.task, config=regime.trl)
    works = []

    class TakeWork(TrainerCallback):
        def on_step_end(self, *args, **kwargs):
            works.append(counter.take())

    trainer.add_callback(TakeWork())
    with FlopCounter(trainer.model) as counter:
        trainer.train()
    return trainer.step_times[warmup:], trl_lengths(trainer)[warmup:], works[warmup:]


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], regime=REGIME_OPTION)
    regime = REGIMES[args.regime]
    warmup, steps, rounds = (1, 3, 1) if args.quick else (2, 6, 3) if regime.skipping else (1, 2, 2)
    rows = []
    for setting in regime.settings:
        model_dir = save_model(regime.size, setting.eos_prob)
        runs = {"polo": partial(polo_steps, model_dir, setting, regime.task, warmup, steps),
                "polo, no skipping": partial(polo_steps, model_dir, setting, regime.task, warmup, steps, NO_SKIP),
                "TRL": partial(trl_steps, model_dir, setting, regime, warmup, steps)}
        if not regime.skipping:
            del runs["polo"]
        med = {name: [] for name in runs}
        timed_steps = {name: ([], [], []) for name in runs}  # every timed step's seconds, row / length, Work
        for _ in range(rounds):
            for name, run in runs.items():
                got = run()
                med[name].append(median(got[0]))
                for kept, new in zip(timed_steps[name], got):
                    kept += new
            print(f"  {setting.name}: " + ", ".join(f"{k} {v[-1]:.3f} s" for k, v in med.items()), flush=True)
        ratios = [median([t / p for t, p in zip(med["TRL"], med[name])]) for name in med if name != "TRL"]
        no_skip, trl = timed_steps["polo, no skipping"], timed_steps["TRL"]
        fractions = [*(f for name in med if name != "TRL" for f in step_fractions(*timed_steps[name])),
                     achieved(Work.of(trl[2]), sum(trl[0]))[1]]
        rows.append([setting.name, median([r["response/length"] for r in no_skip[1]]), median(trl[1]),
                     median([r["frac_zero_adv_groups"] for r in no_skip[1]]), *(median(v) for v in med.values()),
                     *ratios, *fractions])
        for name, (seconds, _, works) in timed_steps.items():
            print(f"  {setting.name}, {name}: {describe(Work.of(works), sum(seconds))}", flush=True)
    header = ["setting", "polo mean len", "TRL mean len", "zero-adv groups", *(f"{k} s/step" for k in med),
              *(f"TRL / {k}" for k in med if k != "TRL"),
              *(f"{k} {part} / limit" for k in med if k != "TRL" for part in ("step", "sample", "update")),
              "TRL step / limit"]
    print_table(f"GRPO step, {args.regime} regime, {regime.size} model, seconds (median of {steps} steps after "
                f"{warmup} warm-up, {rounds} rounds)", header, rows)
    print("\ntargets: " + ("TRL / polo > 1 at 8x8 <=8 tok; >= 1.5 at 32x8 <=64 tok" if regime.skipping
                           else "TRL / polo, no skipping >= 2"))


if __name__ == "__main__":
    main()
