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

    pip install -e '.[bench]' && python bench/train_step.py [--quick] [--regime long]
"""
from __future__ import annotations

from common import REGIME_OPTION, REGIMES, median, parse_args, polo_trainer, print_table, save_model, timed, \
    trl_lengths, trl_trainer


NO_SKIP = ("train.skip_zero_advantage_rows=false",)
"""polo doing TRL's update work: rows with all-zero advantages (groups of equal rewards) are trained too."""


def polo_steps(model_dir, setting, task, warmup: int, steps: int,
               extra=()) -> tuple[list[float], list[float], list[float]]:
    """Seconds, mean response length and fraction of zero-advantage groups of each timed step."""
    trainer = polo_trainer(model_dir, setting, extra=extra, task=task)
    times, lengths, zero = [], [], []
    for _ in range(warmup + steps):
        seconds, row = timed(trainer.step)
        times.append(seconds)
        lengths.append(row["response/length"])
        zero.append(row["frac_zero_adv_groups"])
    return times[warmup:], lengths[warmup:], zero[warmup:]


def trl_steps(model_dir, setting, regime, warmup: int, steps: int) -> tuple[list[float], list[float]]:
    trainer = trl_trainer(model_dir, setting, warmup + steps, task=regime.task, config=regime.trl)
    trainer.train()
    return trainer.step_times[warmup:], trl_lengths(trainer)[warmup:]


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], regime=REGIME_OPTION)
    regime = REGIMES[args.regime]
    warmup, steps, rounds = (1, 3, 1) if args.quick else (2, 6, 3) if regime.skipping else (1, 2, 2)
    rows = []
    for setting in regime.settings:
        model_dir = save_model(regime.size, setting.eos_prob)
        med = {"polo": [], "polo, no skipping": [], "TRL": []} if regime.skipping else {"polo, no skipping": [],
                                                                                        "TRL": []}
        polo_len, trl_len, zero = [], [], []
        for _ in range(rounds):
            if regime.skipping:
                p_times, _, _ = polo_steps(model_dir, setting, regime.task, warmup, steps)
                med["polo"].append(median(p_times))
            n_times, p_len, p_zero = polo_steps(model_dir, setting, regime.task, warmup, steps, NO_SKIP)
            t_times, t_len = trl_steps(model_dir, setting, regime, warmup, steps)
            med["polo, no skipping"].append(median(n_times))
            med["TRL"].append(median(t_times))
            polo_len, trl_len, zero = polo_len + p_len, trl_len + t_len, zero + p_zero
            print(f"  {setting.name}: " + ", ".join(f"{k} {v[-1]:.3f} s" for k, v in med.items()), flush=True)
        ratios = [median([t / p for t, p in zip(med["TRL"], med[name])]) for name in med if name != "TRL"]
        rows.append([setting.name, median(polo_len), median(trl_len), median(zero), *(median(v) for v in med.values()),
                     *ratios])
    header = ["setting", "polo mean len", "TRL mean len", "zero-adv groups", *(f"{k} s/step" for k in med),
              *(f"TRL / {k}" for k in med if k != "TRL")]
    print_table(f"GRPO step, {args.regime} regime, {regime.size} model, seconds (median of {steps} steps after "
                f"{warmup} warm-up, {rounds} rounds)", header, rows)
    print("\ntargets: " + ("TRL / polo > 1 at 8x8 <=8 tok; >= 1.5 at 32x8 <=64 tok" if regime.skipping
                           else "TRL / polo, no skipping >= 2"))


if __name__ == "__main__":
    main()
