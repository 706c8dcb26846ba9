"""One full GRPO step (sample → reward → advantage → update): polo's Trainer vs TRL's GRPOTrainer.

Identical work: polo's tiny model saved as a Hugging Face folder (EOS probability 1/24 per token, so lengths
vary), the addition task's prompts in polo's order and its two rewards, 8 generations per prompt, the same
completion cap, the GRPO loss (per-sequence token mean, PPO clip 0.2, no KL), AdamW (same lr), grad clip 1,
one optimizer step per step, no vLLM, one thread. Each round builds both trainers fresh from the folder,
runs warm-up + timed steps of polo, then of TRL; seconds per step are medians over the timed steps and
the ratio is the median over rounds of TRL / polo.

    pip install -e '.[bench]' && python bench/train_step.py [--quick]
"""
from __future__ import annotations

from common import SETTINGS, median, parse_args, polo_trainer, print_table, save_model, timed, trl_lengths, \
    trl_trainer


def polo_steps(model_dir, setting, warmup: int, steps: int) -> tuple[list[float], list[float]]:
    """Seconds and mean response length of each timed step."""
    trainer = polo_trainer(model_dir, setting)
    times, lengths = [], []
    for _ in range(warmup + steps):
        seconds, row = timed(trainer.step)
        times.append(seconds)
        lengths.append(row["response/length"])
    return times[warmup:], lengths[warmup:]


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
        polo_med, trl_med, ratios, polo_len, trl_len = [], [], [], [], []
        for _ in range(rounds):
            p_times, p_len = polo_steps(model_dir, setting, warmup, steps)
            t_times, t_len = trl_steps(model_dir, setting, warmup, steps)
            polo_med.append(median(p_times))
            trl_med.append(median(t_times))
            ratios.append(trl_med[-1] / polo_med[-1])
            polo_len += p_len
            trl_len += t_len
            print(f"  {setting.name}: polo {polo_med[-1]:.3f} s, TRL {trl_med[-1]:.3f} s", flush=True)
        rows.append([setting.name, median(polo_len), median(trl_len), median(polo_med), median(trl_med),
                     median(ratios)])
    print_table(f"GRPO step, seconds (median of {steps} steps after {warmup} warm-up, {rounds} rounds)", [
        "setting", "polo mean len", "TRL mean len", "polo s/step", "TRL s/step", "TRL / polo"], rows)
    print("\ntargets: TRL / polo > 1 at 8x8 <=8 tok; >= 1.5 at 32x8 <=64 tok")


if __name__ == "__main__":
    main()
