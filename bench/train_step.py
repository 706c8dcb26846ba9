"""One full GRPO step (sample → reward → advantage → update): polo's Trainer vs TRL's GRPOTrainer.

Identical work: polo's tiny model saved as a Hugging Face folder (EOS probability 1/24 per token, so lengths
vary), the addition task's prompts in polo's order and its two rewards, 8 generations per prompt, the same
completion cap, the GRPO loss (per-sequence token mean, PPO clip 0.2, no KL), AdamW (same lr), grad clip 1,
one optimizer step per step, no vLLM, one thread. Each round builds the trainers fresh from the folder,
runs warm-up + timed steps of polo, of polo without skipping zero-advantage rows (TRL trains them; their
gradient is 0), then of TRL; seconds per step are medians over the timed steps and the ratios are medians
over rounds of TRL / polo.

    pip install -e '.[bench]' && python bench/train_step.py [--quick]
"""
from __future__ import annotations

from common import SETTINGS, median, parse_args, polo_trainer, print_table, save_model, timed, trl_lengths, \
    trl_trainer


NO_SKIP = ("train.skip_zero_advantage_rows=false",)
"""polo doing TRL's update work: rows with all-zero advantages (groups of equal rewards) are trained too."""


def polo_steps(model_dir, setting, warmup: int, steps: int, extra=()) -> tuple[list[float], list[float], list[float]]:
    """Seconds, mean response length and fraction of zero-advantage groups of each timed step."""
    trainer = polo_trainer(model_dir, setting, extra=extra)
    times, lengths, zero = [], [], []
    for _ in range(warmup + steps):
        seconds, row = timed(trainer.step)
        times.append(seconds)
        lengths.append(row["response/length"])
        zero.append(row["frac_zero_adv_groups"])
    return times[warmup:], lengths[warmup:], zero[warmup:]


def trl_steps(model_dir, setting, warmup: int, steps: int) -> tuple[list[float], list[float]]:
    trainer = trl_trainer(model_dir, setting, warmup + steps)
    trainer.train()
    return trainer.step_times[warmup:], trl_lengths(trainer)[warmup:]


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    warmup, steps, rounds = (1, 3, 1) if args.quick else (2, 6, 3)
    model_dir = save_model()
    rows = []
    for setting in SETTINGS:
        med = {"polo": [], "polo, no skipping": [], "TRL": []}
        polo_len, trl_len, zero = [], [], []
        for _ in range(rounds):
            p_times, p_len, p_zero = polo_steps(model_dir, setting, warmup, steps)
            n_times, _, _ = polo_steps(model_dir, setting, warmup, steps, NO_SKIP)
            t_times, t_len = trl_steps(model_dir, setting, warmup, steps)
            for name, times in zip(med, (p_times, n_times, t_times)):
                med[name].append(median(times))
            polo_len, trl_len, zero = polo_len + p_len, trl_len + t_len, zero + p_zero
            print(f"  {setting.name}: " + ", ".join(f"{k} {v[-1]:.3f} s" for k, v in med.items()), flush=True)
        ratio = [t / p for t, p in zip(med["TRL"], med["polo"])]
        ratio_no_skip = [t / p for t, p in zip(med["TRL"], med["polo, no skipping"])]
        rows.append([setting.name, median(polo_len), median(trl_len), median(zero), *(median(v) for v in med.values()),
                     median(ratio), median(ratio_no_skip)])
    print_table(f"GRPO step, seconds (median of {steps} steps after {warmup} warm-up, {rounds} rounds)", [
        "setting", "polo mean len", "TRL mean len", "zero-adv groups", "polo s/step", "polo no-skip s/step",
        "TRL s/step", "TRL / polo", "TRL / polo no-skip"], rows)
    print("\ntargets: TRL / polo > 1 at 8x8 <=8 tok; >= 1.5 at 32x8 <=64 tok")


if __name__ == "__main__":
    main()
