"""polo's core math at scale, and the share of a training step spent outside the model.

1. Advantage + policy loss + aggregation (forward and backward to ``logp``) on a synthetic rollout batch of
   B samples × T = 128 response tokens (groups of 8, random lengths): ``grpo`` + ``ppo_clip`` +
   ``token_mean``, and ``gae`` (critic values, whitened); also the GAE recursion alone on the same tensors
   stored row-major and column-major. Time per call and growth with B.
2. One full ``Trainer.step`` split by timers on the model's forward (every outermost Hugging Face model the
   trainer holds), ``Tensor.backward`` and ``optimizer.step``; non-model work = step − forward − backward.
   A torch.profiler pass then lists the ops that take the most self time outside forward/backward.

``--regime long`` (issue #14) runs part 2 only, on the base model with 8-digit ``addition_trace`` prompts,
4 × 8 completions of ≤ 128 and ≤ 256 tokens, no zero-advantage rows skipped.

    python bench/core_math.py [--quick] [--regime long]
"""
from __future__ import annotations

import contextlib
import time
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile, record_function
from transformers import PreTrainedModel

from common import ADDITION, DEFAULT_SETTING, REGIME_OPTION, REGIMES, SETTINGS, interleaved, median, parse_args, polo_trainer, \
    print_table, save_model
from polo.core import aggregation  # noqa: F401  (registers the aggregations)
from polo.core.advantages.gae import gae as gae_fn
from polo.core.aggregation import StepCounts
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES, AGGREGATIONS, POLICY_LOSSES

T, GROUP = 128, 8


def synthetic_batch(B: int) -> tuple[RolloutBatch, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T) < lengths[:, None]).long()
    batch = RolloutBatch(
        prompt_ids=torch.zeros(B, 8, dtype=torch.long), prompt_mask=torch.ones(B, 8, dtype=torch.long),
        response_ids=torch.zeros(B, T, dtype=torch.long), response_mask=mask, group=torch.arange(B) // GROUP,
        rewards=torch.rand(B, 2, generator=g), old_logp=-torch.rand(B, T, generator=g) * mask,
        values=torch.randn(B, T, generator=g) * mask)
    return batch, (batch.old_logp + 0.1 * torch.randn(B, T, generator=g)) * mask


def math_cases(B: int) -> dict:
    import polo.core.advantages  # noqa: F401  (registration)
    import polo.core.losses  # noqa: F401

    batch, logp0 = synthetic_batch(B)
    grpo, gae = ADVANTAGES.build("grpo"), ADVANTAGES.build("gae")
    loss_fn, token_mean = POLICY_LOSSES.build("ppo_clip"), AGGREGATIONS.build("token_mean")

    def grpo_step():
        batch.advantages = grpo(batch).advantages
        logp = logp0.clone().requires_grad_()
        out = loss_fn(logp, batch)
        token_mean(out.token_loss, batch.mask, StepCounts.from_mask(batch.response_mask, T)).backward()

    # the recursion alone, on the same tensors stored row-major (as the batch holds them) and column-major
    rows = (batch.scalar_reward()[:, None] * batch.mask, batch.values, batch.mask)
    cols = tuple(x.T.contiguous().T for x in rows)
    return {"grpo+ppo_clip+token_mean": grpo_step, "gae": lambda: gae(batch),
            "gae() row-major": lambda: gae_fn(*rows, 1.0, 1.0), "gae() column-major": lambda: gae_fn(*cols, 1.0, 1.0)}


def core_math(sizes: list[int], reps: int) -> None:
    rows, base = [], {}
    for B in sizes:
        times, _ = interleaved(math_cases(B), reps)
        for name, t in times.items():
            base.setdefault(name, (B, median(t)))
            b0, t0 = base[name]
            rows.append([name, B, median(t) * 1e3, median(t) / B * 1e9 / T, (median(t) / t0) / (B / b0)])
        print(f"  B={B} done", flush=True)
    print_table(f"core math, T = {T} (median of {reps})", [
        "computation", "B", "ms / call", "ns / token", f"time growth / B growth (vs B={sizes[0]})"], rows)


class StepTimers:
    """Timers (and profiler labels) on a trainer's model forwards (``forward:NAME`` for each outermost
    Hugging Face model of the policy and of each model role: reference, critic, ...), ``Tensor.backward`` and
    ``optimizer.step``."""

    def __init__(self, trainer):
        self.seconds: dict[str, float] = defaultdict(float)
        seen: set[int] = set()
        for attr, value in {"policy": trainer.policy, **trainer.models}.items():
            if isinstance(value, torch.nn.Module):
                for module in value.modules():
                    if isinstance(module, PreTrainedModel) and id(module) not in seen:
                        seen.update(id(m) for m in module.modules())
                        module.forward = self.wrap(f"forward:{attr}", module.forward)
        trainer.optimizer.step = self.wrap("optimizer.step", trainer.optimizer.step)

    @staticmethod
    def is_model(label: str) -> bool:
        return label.startswith("forward:") or label == "backward"

    def wrap(self, name: str, fn):
        def timed_fn(*args, **kwargs):
            start = time.perf_counter()
            with record_function(name):
                out = fn(*args, **kwargs)
            self.seconds[name] += time.perf_counter() - start
            return out

        return timed_fn

    @contextlib.contextmanager
    def backward_timed(self):
        original = torch.Tensor.backward
        torch.Tensor.backward = self.wrap("backward", original)
        try:
            yield
        finally:
            torch.Tensor.backward = original


def outside_model(prof, top: int) -> list[list]:
    """The ``top`` op names by self CPU time among profiler events outside model forward/backward."""
    totals: dict[str, list] = defaultdict(lambda: [0.0, 0])
    for event in prof.events():
        parent, inside = event, False
        while parent is not None and not inside:
            inside = StepTimers.is_model(parent.name)
            parent = parent.cpu_parent
        if not inside:
            totals[event.name][0] += event.self_cpu_time_total / 1e3
            totals[event.name][1] += 1
    return [[name, ms, n] for name, (ms, n) in sorted(totals.items(), key=lambda kv: -kv[1][0])[:top]]


def step_share(settings, steps: int, size: str = "tiny", task: dict = ADDITION, extra=()) -> None:
    rows, evidence = [], {}
    for setting in settings:
        trainer = polo_trainer(save_model(size, setting.eos_prob), setting, extra=extra, task=task)
        trainer.step()  # warm-up
        timers, shares = StepTimers(trainer), defaultdict(list)
        with timers.backward_timed():
            for _ in range(steps):
                timers.seconds.clear()
                start = time.perf_counter()
                row = trainer.step()
                total = time.perf_counter() - start
                shares["step s"].append(total)
                for label, seconds in sorted(timers.seconds.items()):
                    shares[label].append(seconds / total)
                model = sum(s for label, s in timers.seconds.items() if timers.is_model(label))
                shares["non-model"].append(1 - model / total)
                for key in ("time/sample", "time/inputs", "time/update"):
                    if key in row:
                        shares[key].append(row[key] / total)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                trainer.step()
        rows.append({k: median(v) for k, v in shares.items()} | {"setting": setting.name})
        evidence[setting.name] = outside_model(prof, 12)
        print(f"  {setting.name} done", flush=True)
    keys = ["setting", *dict.fromkeys(k for row in rows for k in row if k != "setting")]
    print_table(f"share of one polo Trainer.step (median of {steps} steps; time/* are polo's own stage timers)",
                keys, [[row.get(k, 0.0) for k in keys] for row in rows])
    for name, ops in evidence.items():
        print_table(f"profiler, {name}: top self-CPU ops outside model forward/backward (one step, profiled)",
                    ["op", "self ms", "calls"], ops)
    print("\ntarget: non-model < 0.05 of a step")


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], regime=REGIME_OPTION)
    if args.regime != "short":
        regime = REGIMES[args.regime]
        return step_share(regime.settings, 2 if args.quick else 3, regime.size, regime.task,
                          ("train.skip_zero_advantage_rows=false",))
    core_math([1024, 16384] if args.quick else [1024, 16384, 262144], 3 if args.quick else 7)
    step_share(SETTINGS + [DEFAULT_SETTING], 2 if args.quick else 6)


if __name__ == "__main__":
    main()
