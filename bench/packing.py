"""Packed rows vs padded rows: polo's policy update on the same scored batch, ``train.pack_rows`` true vs false.

For each setting, one ``Trainer.step`` of the ``grpo`` recipe (no zero-advantage rows skipped) gives a scored batch;
then ``Updater.run`` on that batch (forward + backward + AdamW step) and the no-grad log-prob forward
(``Trainer.policy_logp``: the old and reference log-probs' path) are timed with the policy's ``pack_rows`` set to
False (padded rows, prompt sharing) and True (packed rows), alternating, after one warm-up round. Printed: the
medians, the median of the paired ratios packed / padded, the token positions each computes and the path
``auto`` takes. ``--regime long`` (the default): the task ladder's shapes, the base model, 4 prompts × 8 samples of
8-digit ``addition_trace`` prompts, ≤ 128 and ≤ 256 tokens (P(EOS) = 1/cap, common.Regime); ``--regime short``:
the tiny model's addition settings, where prompt sharing should win.

Each call's model FLOPs are counted as it runs (bench/limit.py; padding and packed filler positions included, as
computed); ``/ limit`` columns are the fraction of the machine's matmul throughput at the call's own GEMM shapes,
measured in the same run, that it achieved.

    python bench/packing.py [--quick] [--regime long|short] [--reps N]
"""
from __future__ import annotations

from common import REGIME_OPTION, REGIMES, interleaved, median, paired_ratio, parse_args, polo_trainer, print_table, \
    save_model
from limit import FlopCounter, Work, achieved, describe
from polo.policy.packing import reads_of
from polo.policy.inputs import trim_left_padding
from polo.policy.prefix import distinct_prompts, packing_choice


def scored_batch(trainer):
    """The batch ``trainer.step()`` hands its updater (the step itself runs too)."""
    run, seen = trainer.updater.run, []
    trainer.updater.run = lambda batch, *args: (seen.append(batch), run(batch, *args))[1]
    trainer.step()
    trainer.updater.run = run
    return seen[0]


def positions(policy, batch) -> tuple[int, int]:
    """``(padded, packed)`` token positions of the policy's log-prob forward on ``batch``."""
    ids, mask = trim_left_padding(batch.prompt_ids, batch.prompt_mask)
    packed, padded = packing_choice(policy.model, mask, distinct_prompts(ids, mask), batch.response_ids.shape[1] - 1,
                                    reads_of(batch.response_mask))
    return padded, packed.positions


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], regime={**REGIME_OPTION, "default": "long"},
                      reps={"type": int, "default": 5, "help": "timed repetitions per case (default 5)"})
    regime = REGIMES[args.regime]
    reps = 3 if args.quick else args.reps
    rows = []
    for setting in regime.settings[:1] if args.quick else regime.settings:
        trainer = polo_trainer(save_model(regime.size, setting.eos_prob), setting,
                               extra=("train.skip_zero_advantage_rows=false",), task=regime.task)
        batch, policy = scored_batch(trainer), trainer.policy

        def update(pack: bool):
            def run():
                policy.pack_rows = pack
                trainer.updater.run(batch)
            return run

        def logp(pack: bool):
            def run():
                policy.pack_rows = pack
                trainer.policy_logp(batch)
            return run

        cases = {"update padded": update(False), "update packed": update(True),
                 "logp padded": logp(False), "logp packed": logp(True)}
        with FlopCounter(policy.hf_model) as counter:
            times, got = interleaved({name: counter.counted(fn) for name, fn in cases.items()}, reps)
        works = {name: Work.of(work for _, work in runs) for name, runs in got.items()}
        padded, packed = positions(policy, batch)
        rows.append([setting.name, float(batch.response_mask.sum(1).float().mean()), padded, packed,
                     "packed" if packed < padded else "padded",
                     median(times["update padded"]), median(times["update packed"]),
                     paired_ratio(times["update packed"], times["update padded"]),
                     median(times["logp padded"]), median(times["logp packed"]),
                     paired_ratio(times["logp packed"], times["logp padded"]),
                     *(achieved(work, sum(times[name]))[1] for name, work in works.items())])
        for name, work in works.items():
            print(f"  {setting.name}, {name}: {describe(work, sum(times[name]))}", flush=True)
        print(f"  {setting.name} done", flush=True)
    print_table(f"packed vs padded rows, {regime.size} model (medians of {reps}; ratios: medians of paired ratios)",
                ["setting", "mean len", "padded pos", "packed pos", "auto", "update padded s", "update packed s",
                 "**update packed / padded**", "logp padded s", "logp packed s", "logp packed / padded",
                 *(f"{name} / limit" for name in cases)], rows)


if __name__ == "__main__":
    main()
