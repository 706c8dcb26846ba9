"""The training loop: sample prompts → G rollouts each → rewards → advantages → minibatch updates.

One ``Trainer.step`` is one pipeline pass of DESIGN.md. The trainer provides exactly the inputs the
chosen components declare (``needs()``): a frozen reference policy only for ``ref_logp``, a critic only
for ``values``. Everything random (data order, sampling, minibatch shuffles) draws from generators that
are checkpointed, so ``--resume`` continues a killed run bit for bit.
"""
from __future__ import annotations

import math
import random
import time
from pathlib import Path
from typing import Any

import torch

from polo.core.aggregation import StepCounts
from polo.core.losses.value import clipped_value_loss
from polo.policy.policy import Policy, ValueModel
from polo.policy.reference import frozen_copy
from polo.tasks import build_task
from polo.tasks.rewards import RewardSpec
from polo.train.checkpoint import latest_checkpoint, load_checkpoint, prune_checkpoints, save_checkpoint
from polo.train.collect import collect
from polo.train.config import Recipe, build_components, dump_recipe
from polo.train.data import PromptStream
from polo.train.evaluate import accuracy
from polo.train.metrics import MetricsLog
from polo.train.plots import plot_run
from polo.train.schedule import lr_multiplier
from polo.train.stats import rollout_metrics
from polo.train.warm_start import ensure_warm_start


def load_policy(recipe: Recipe, task, log=print) -> Policy:
    """The recipe's checkpoint, or the warm-started built-in model."""
    path = recipe.model.path or ensure_warm_start(recipe, task, log)
    lora = recipe.model.lora if recipe.model.lora.r > 0 else None
    return Policy.load(path, lora=lora, chat_template=recipe.model.chat_template)


def max_new_tokens(recipe: Recipe, task) -> int:
    return recipe.rollout.max_new_tokens or task.max_completion_chars + 1


def _micro_slices(n: int, size: int | None) -> list[slice]:
    size = size or n
    return [slice(i, min(n, i + size)) for i in range(0, n, size)]


class Trainer:
    def __init__(self, recipe: Recipe, run_dir: Path, log=print):
        self.recipe, self.run_dir, self.log = recipe, Path(run_dir), log
        if recipe.train.threads:
            torch.set_num_threads(recipe.train.threads)
        torch.manual_seed(recipe.seed)
        random.seed(recipe.seed)
        self.task = build_task(recipe.task)
        specs = recipe.rewards or [{"name": s.name, "weight": s.weight} for s in self.task.default_rewards]
        self.reward_specs = [RewardSpec(**s) for s in specs]
        self.policy = load_policy(recipe, self.task, log)
        c = build_components(recipe)
        self.advantage, self.policy_loss, self.aggregation, self.divergence = (
            c["advantage"], c["policy_loss"], c["aggregation"], c["kl"])
        self.needs = self.advantage.needs() | self.policy_loss.needs() | ({"ref_logp"} if recipe.kl.coef > 0 else set())
        self.reference = frozen_copy(self.policy) if "ref_logp" in self.needs else None
        self.critic = ValueModel.from_policy(self.policy) if "values" in self.needs else None
        o = recipe.optim
        self.params = [p for p in self.policy.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=o.lr, betas=o.betas, weight_decay=o.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_multiplier(o, recipe.train.steps))
        self.critic_optimizer = (
            torch.optim.AdamW(self.critic.parameters(), lr=recipe.critic.lr) if self.critic is not None else None
        )
        self.max_new_tokens = max_new_tokens(recipe, self.task)
        pool = self.task.examples("train", recipe.train.train_pool, seed=recipe.seed)
        self.stream = PromptStream(pool, seed=recipe.seed)
        self.eval_examples = self.task.examples("test", recipe.train.eval_size, seed=recipe.seed)
        self.sample_generator = torch.Generator().manual_seed(recipe.seed + 1)
        self.shuffle_generator = torch.Generator().manual_seed(recipe.seed + 2)
        self.step_count = 0
        self.elapsed = 0.0
        self.metrics = MetricsLog(self.run_dir / "metrics.jsonl")

    # ----------------------------------------------------------------- state
    def state(self) -> tuple[dict, dict]:
        weights = {"policy": self.policy.state_dict()}
        state: dict[str, Any] = {
            "step": self.step_count,
            "elapsed": self.elapsed,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "stream": self.stream.state_dict(),
            "sample_generator": self.sample_generator.get_state(),
            "shuffle_generator": self.shuffle_generator.get_state(),
            "torch_rng": torch.get_rng_state(),
            "python_rng": random.getstate(),
        }
        if self.critic is not None:
            weights["critic"] = self.critic.state_dict()
            state["critic_optimizer"] = self.critic_optimizer.state_dict()
        return weights, state

    def save(self) -> Path:
        weights, state = self.state()
        path = save_checkpoint(self.run_dir, self.step_count, weights, state)
        prune_checkpoints(self.run_dir, keep=2)
        return path

    def restore(self, path: Path) -> None:
        weights, state = load_checkpoint(path)
        self.policy.load_state_dict(weights["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.stream.load_state_dict(state["stream"])
        self.sample_generator.set_state(state["sample_generator"])
        self.shuffle_generator.set_state(state["shuffle_generator"])
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["python_rng"])
        if self.critic is not None:
            self.critic.load_state_dict(weights["critic"])
            self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.step_count, self.elapsed = state["step"], state["elapsed"]
        self.metrics.truncate_after(self.step_count)

    # ----------------------------------------------------------------- one step
    def step(self) -> dict[str, float]:
        r = self.recipe
        timings: dict[str, float] = {}
        t = time.perf_counter()
        examples = self.stream.next(r.rollout.prompts_per_step)
        self.policy.eval()
        got = collect(self.policy, self.task, self.reward_specs, examples, r.rollout, self.max_new_tokens,
                      self.sample_generator)
        batch = got.batch
        timings["sample"] = time.perf_counter() - t

        t = time.perf_counter()
        with torch.no_grad():
            if self.reference is not None:
                batch.ref_logp = self.reference.forward_logp(
                    batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask,
                    temperature=r.rollout.temperature)["logp"]
            if self.critic is not None:
                batch.values = self.critic(batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask)
        timings["score"] = time.perf_counter() - t

        t = time.perf_counter()
        result = self.advantage(batch)
        batch.advantages, batch.returns = result.advantages, result.returns
        timings["advantage"] = time.perf_counter() - t

        t = time.perf_counter()
        update = self.update(batch)
        timings["update"] = time.perf_counter() - t

        row = rollout_metrics(batch, got.correct)
        row.update(update)
        row["optim/lr"] = self.optimizer.param_groups[0]["lr"]
        self.scheduler.step()
        total = sum(timings.values())
        row.update({f"time/{k}": v for k, v in timings.items()})
        row["time/step"] = total
        row["perf/tokens_per_s"] = float(batch.response_mask.sum()) / max(total, 1e-9)
        return row

    def update(self, batch) -> dict[str, float]:
        """``epochs`` passes; each pass splits the batch into ``minibatches`` optimizer steps."""
        r = self.recipe
        policy_frozen = self.critic is not None and self.step_count < r.critic.warmup_steps
        sums: dict[str, float] = {}
        weight_total = 0.0
        grad_norms = []
        self.policy.train()
        for _ in range(r.train.epochs):
            order = torch.randperm(batch.batch_size, generator=self.shuffle_generator)
            for rows in order.chunk(r.train.minibatches):
                minibatch = batch.select(rows)
                counts = StepCounts.from_mask(minibatch.response_mask, self.max_new_tokens)
                for part in _micro_slices(len(rows), r.train.micro_batch_size):
                    micro = minibatch.select(torch.arange(len(rows))[part])
                    stats = self._backward(micro, counts, policy_frozen)
                    w = float(micro.response_mask.sum())
                    weight_total += w
                    for k, v in stats.items():
                        sums[k] = sums.get(k, 0.0) + w * v
                if not policy_frozen:
                    clip = r.optim.grad_clip or math.inf
                    grad_norms.append(float(torch.nn.utils.clip_grad_norm_(self.params, clip)))
                    self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                if self.critic is not None:
                    torch.nn.utils.clip_grad_norm_(self.critic.parameters(), r.optim.grad_clip or math.inf)
                    self.critic_optimizer.step()
                    self.critic_optimizer.zero_grad(set_to_none=True)
        self.policy.eval()
        out = {k: v / max(weight_total, 1e-9) for k, v in sums.items()}
        if grad_norms:
            out["optim/grad_norm"] = sum(grad_norms) / len(grad_norms)
        return out

    def _backward(self, micro, counts: StepCounts, policy_frozen: bool) -> dict[str, float]:
        r = self.recipe
        mask = micro.mask
        stats: dict[str, float] = {}
        if not policy_frozen:
            fw = self.policy.forward_logp(micro.prompt_ids, micro.prompt_mask, micro.response_ids,
                                          micro.response_mask, temperature=r.rollout.temperature,
                                          return_entropy=True)
            logp, entropy = fw["logp"], fw["entropy"]
            out = self.policy_loss(logp, micro)
            loss = self.aggregation(out.token_loss, mask, counts)
            n = mask.sum().clamp_min(1)
            if r.kl.coef > 0:
                kl = self.divergence(logp, micro.ref_logp)
                loss = loss + r.kl.coef * self.aggregation(kl, mask, counts)
                stats["policy/kl_ref"] = float((kl * mask).sum() / n)
            if r.entropy_coef:
                loss = loss - r.entropy_coef * self.aggregation(entropy, mask, counts)
            loss.backward()
            delta = (micro.old_logp - logp.detach()) * mask
            stats["policy/kl_old"] = float(delta.sum() / n)
            stats["policy/entropy"] = float((entropy.detach() * mask).sum() / n)
            stats["loss/policy"] = float(loss.detach())
            stats.update({f"policy/{k}": float(v) for k, v in out.metrics.items()})
        if self.critic is not None:
            values = self.critic(micro.prompt_ids, micro.prompt_mask, micro.response_ids, micro.response_mask)
            vloss = self.aggregation(clipped_value_loss(values, micro.values, micro.returns, r.critic.value_clip),
                                     mask, counts)
            vloss.backward()
            stats["loss/value"] = float(vloss)
        return stats

    # ----------------------------------------------------------------- loop
    def evaluate(self) -> dict[str, float]:
        t = time.perf_counter()
        acc = accuracy(self.policy, self.task, self.eval_examples, self.max_new_tokens, greedy=True)
        return {"eval/greedy_accuracy": acc, "time/eval": time.perf_counter() - t}

    def run(self, progress=None) -> list[dict]:
        r = self.recipe
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.yaml").write_text(dump_recipe(r))
        if self.step_count == 0:
            self.metrics.truncate_after(-1)
            self.metrics.write({"step": 0, **self.evaluate()})
        budget = r.train.max_minutes * 60 if r.train.max_minutes else math.inf
        title = f"{r.name} ({self.run_dir.name})"
        while self.step_count < r.train.steps and self.elapsed < budget:
            start = time.perf_counter()
            row = self.step()
            self.step_count += 1
            last = self.step_count == r.train.steps or self.elapsed + time.perf_counter() - start >= budget
            if self.step_count % r.train.eval_every == 0 or last:
                row.update(self.evaluate())
            self.elapsed += time.perf_counter() - start
            row = {"step": self.step_count, "elapsed_s": self.elapsed, **row}
            self.metrics.write(row)
            if progress is not None:
                progress(self.step_count, row)
            if self.step_count % r.train.save_every == 0 or last:
                self.save()
                plot_run(self.metrics.read(), self.run_dir / "curves.png", title=title)
        return self.metrics.read()


def resume(run_dir: Path, log=print) -> Trainer:
    """Rebuild the trainer from ``run_dir/config.yaml`` and its last checkpoint."""
    from polo.train.config import load_recipe

    recipe = load_recipe(Path(run_dir) / "config.yaml")
    trainer = Trainer(recipe, run_dir, log)
    ckpt = latest_checkpoint(run_dir)
    if ckpt is None:
        raise FileNotFoundError(f"{run_dir} has no checkpoint to resume from; start it again instead")
    trainer.restore(ckpt)
    log(f"resumed {run_dir} at step {trainer.step_count}")
    return trainer
