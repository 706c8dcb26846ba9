"""The training loop: sample prompts → G rollouts each → rewards → shaping → advantages → token credit →
minibatch updates → component hooks.

One ``Trainer.step`` is one pipeline pass of DESIGN.md. The trainer provides exactly the inputs the chosen
components declare (``needs()``, see polo/train/inputs.py): a frozen reference policy only for
``ref_logp``, a critic only for ``values``. Everything random (data order, sampling, minibatch shuffles)
draws from generators that are checkpointed together with every component's state, so ``--resume``
continues a killed run bit for bit.
"""
from __future__ import annotations

import math
import random
import time
from pathlib import Path
from typing import Any

import torch

from polo.core.batch import concat_batches
from polo.core.context import StepContext
from polo.policy.policy import Policy, ValueModel
from polo.policy.reference import frozen_copy
from polo.rollout.action_mask import NucleusActionMask
from polo.tasks import build_task
from polo.tasks.rewards import RewardSpec
from polo.train.checkpoint import latest_checkpoint, load_checkpoint, prune_checkpoints, save_checkpoint
from polo.train.collect import collect
from polo.train.config import Recipe, build_components, dump_recipe
from polo.train.data import PromptStream
from polo.train.evaluate import accuracy
from polo.train.inputs import check_needs, provide_inputs
from polo.train.metrics import MetricsLog
from polo.train.plots import plot_run
from polo.train.schedule import lr_multiplier
from polo.train.stats import advantage_diagnostics, rollout_metrics
from polo.train.update import Updater
from polo.train.warm_start import ensure_warm_start


def load_policy(recipe: Recipe, task, log=print) -> Policy:
    """The recipe's checkpoint, or the warm-started built-in model."""
    path = recipe.model.path or ensure_warm_start(recipe, task, log)
    lora = recipe.model.lora if recipe.model.lora.r > 0 else None
    return Policy.load(path, lora=lora, chat_template=recipe.model.chat_template)


def set_threads(recipe: Recipe) -> None:
    threads = recipe.train.threads or (1 if recipe.model.path is None else None)
    if threads:
        torch.set_num_threads(threads)


def max_new_tokens(recipe: Recipe, task) -> int:
    return recipe.rollout.max_new_tokens or task.max_completion_chars + 1


class Trainer:
    def __init__(self, recipe: Recipe, run_dir: Path, log=print):
        self.recipe, self.run_dir, self.log = recipe, Path(run_dir), log
        set_threads(recipe)
        torch.manual_seed(recipe.seed)
        random.seed(recipe.seed)
        self.task = build_task(recipe.task)
        specs = recipe.rewards or [{"name": s.name, "weight": s.weight} for s in self.task.default_rewards]
        self.reward_specs = [RewardSpec(**s) for s in specs]
        self.policy = load_policy(recipe, self.task, log)
        self.components = build_components(recipe)
        c = self.components
        self.advantage, self.policy_loss, self.aggregation, self.divergence = (
            c["advantage"], c["policy_loss"], c["aggregation"], c["kl"])
        self.kl_coef = recipe.kl.coef
        # the KL divergence's inputs are needed only when its loss term is on
        self.needs = set().union(*(comp.needs() for name, comp in c.items() if name != "kl")) | (
            self.divergence.needs() | {"ref_logp"} if recipe.kl.coef > 0 else set())
        check_needs(self.needs)
        self.reference = frozen_copy(self.policy) if self.needs & {"ref_logp", "ref_dist"} else None
        self.critic = ValueModel.from_policy(self.policy) if "values" in self.needs else None
        self.privileged_critic = ValueModel.from_policy(self.policy) if "values_privileged" in self.needs else None
        o = recipe.optim
        self.params = [p for p in self.policy.parameters() if p.requires_grad]
        fused = all(p.device.type in ("cpu", "cuda") for p in self.params)  # one kernel for all parameters
        self.optimizer = torch.optim.AdamW(self.params, lr=o.lr, betas=o.betas, weight_decay=o.weight_decay,
                                           fused=fused)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_multiplier(o, recipe.train.steps))
        self.critic_optimizers = {
            name: torch.optim.AdamW(model.parameters(), lr=recipe.critic.lr)
            for name, model in (("critic", self.critic), ("privileged_critic", self.privileged_critic))
            if model is not None
        }
        self.max_new_tokens = max_new_tokens(recipe, self.task)
        pool = self.task.examples("train", recipe.train.train_pool, seed=recipe.seed)
        self.stream = PromptStream(pool, seed=recipe.seed)
        self.eval_examples = self.task.examples("test", recipe.train.eval_size, seed=recipe.seed)
        self.sample_generator = torch.Generator().manual_seed(recipe.seed + 1)
        self.shuffle_generator = torch.Generator().manual_seed(recipe.seed + 2)
        self.replay: list = []
        am = recipe.rollout.action_mask
        self.mask_policy = frozen_copy(self.policy) if am is not None else None
        self.action_mask = NucleusActionMask(self.mask_policy, am.top_p, am.min_tokens_to_keep) if am else None
        self.step_count = 0
        self.elapsed = 0.0
        self.metrics = MetricsLog(self.run_dir / "metrics.jsonl")
        self.updater = Updater(self)

    # ----------------------------------------------------------------- critics
    def critics(self):
        """(model, optimizer) of every critic."""
        return [(getattr(self, name), opt) for name, opt in self.critic_optimizers.items()]

    def critic_inputs(self, micro):
        """(name, critic, prompt_ids, prompt_mask, old values) for each critic's loss on ``micro``."""
        out = []
        if self.critic is not None:
            out.append(("value", self.critic, micro.prompt_ids, micro.prompt_mask, micro.values))
        if self.privileged_critic is not None:
            e = micro.extras
            out.append(("value_privileged", self.privileged_critic, e["privileged_prompt_ids"],
                        e["privileged_prompt_mask"], e["values_privileged"]))
        return out

    # ----------------------------------------------------------------- state
    def state(self) -> tuple[dict, dict]:
        weights = {"policy": self.policy.state_dict()}
        state: dict[str, Any] = {
            "step": self.step_count,
            "elapsed": self.elapsed,
            "kl_coef": self.kl_coef,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "stream": self.stream.state_dict(),
            "sample_generator": self.sample_generator.get_state(),
            "shuffle_generator": self.shuffle_generator.get_state(),
            "torch_rng": torch.get_rng_state(),
            "python_rng": random.getstate(),
            "components": {name: comp.state_dict() for name, comp in self.components.items()},
            "advantage_config": self.advantage.model_dump(),
            "replay": self.replay,
        }
        if self.mask_policy is not None:
            weights["mask_policy"] = self.mask_policy.state_dict()
        for name, opt in self.critic_optimizers.items():
            weights[name] = getattr(self, name).state_dict()
            state[f"{name}_optimizer"] = opt.state_dict()
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
        for name, comp in self.components.items():
            comp.load_state_dict(state["components"][name])
        for key, value in state["advantage_config"].items():
            setattr(self.advantage, key, value)
        if self.mask_policy is not None:
            self.mask_policy.load_state_dict(weights["mask_policy"])
        for name, opt in self.critic_optimizers.items():
            getattr(self, name).load_state_dict(weights[name])
            opt.load_state_dict(state[f"{name}_optimizer"])
        self.replay = state["replay"]
        self.kl_coef = state["kl_coef"]
        self.step_count, self.elapsed = state["step"], state["elapsed"]
        self.metrics.truncate_after(self.step_count)

    # ----------------------------------------------------------------- one step
    def generate(self, examples, indices):
        return collect(self.policy, self.task, self.reward_specs, examples, indices, self.recipe.rollout,
                       self.max_new_tokens, self.sample_generator, action_mask=self.action_mask)

    def step(self) -> dict[str, float]:
        r, c = self.recipe, self.components
        timings: dict[str, float] = {}
        t = time.perf_counter()
        self.policy.eval()
        got, row = c["sampler"].collect(self.stream, self.generate, r.rollout.prompts_per_step,
                                        self.sample_generator, c)
        batch = got.batch
        timings["sample"] = time.perf_counter() - t

        t = time.perf_counter()
        for name, shaping in c.items():
            if name.startswith("shaping."):
                extra = shaping(batch, self.max_new_tokens).to(batch.rewards)
                batch.rewards = torch.cat([batch.rewards, extra[:, None]], 1)
                batch.reward_names = (*batch.reward_names, shaping.registry_name)
                batch.reward_weights = torch.cat([batch.reward_weights, torch.tensor([shaping.weight])])
        if r.rollout.mask_truncated:
            batch.response_mask = batch.response_mask * ~batch.truncated[:, None]
        provide_inputs(self, got, self.needs)
        timings["inputs"] = time.perf_counter() - t

        t = time.perf_counter()
        result = self.advantage(batch)
        batch.advantages, batch.returns = result.advantages, result.returns
        if "credit" in c:
            batch.advantages = batch.advantages * c["credit"](batch)
        row.update(rollout_metrics(batch, got.correct))
        row.update(advantage_diagnostics(batch))
        trained = batch if result.keep is None else batch.select(result.keep)
        timings["advantage"] = time.perf_counter() - t

        t = time.perf_counter()
        row.update(self.updater.run(concat_batches([trained, *self.replay])))
        if r.train.replay_steps:
            self.replay = [trained, *self.replay][: r.train.replay_steps]
        timings["update"] = time.perf_counter() - t

        t = time.perf_counter()
        context = StepContext(self.step_count + 1, self.policy_logp, self.optimizer.param_groups[0]["lr"])
        for name, comp in c.items():
            row.update(comp.after_update(batch, context))
        self.adapt_kl(row)
        if self.mask_policy is not None and (self.step_count + 1) % r.rollout.action_mask.sync_every == 0:
            self.mask_policy.load_state_dict(self.policy.state_dict())
        timings["hooks"] = time.perf_counter() - t

        row["optim/lr"] = self.optimizer.param_groups[0]["lr"]
        self.scheduler.step()
        total = sum(timings.values())
        row.update({f"time/{k}": v for k, v in timings.items()})
        row["time/step"] = total
        row["perf/tokens_per_s"] = float(batch.response_mask.sum()) / max(total, 1e-9)
        return row

    @torch.no_grad()
    def policy_logp(self, batch) -> torch.Tensor:
        return self.policy.forward_logp(batch.prompt_ids, batch.prompt_mask, batch.response_ids,
                                        batch.response_mask, temperature=self.recipe.rollout.temperature,
                                        allow=batch.extras.get("allow"))["logp"]

    def adapt_kl(self, row: dict) -> None:
        """Adaptive KL controller on whichever KL coefficient is in use (loss term or KL-in-reward)."""
        k = self.recipe.kl
        if k.target is None:
            return
        in_reward = self.kl_coef == 0 and getattr(self.advantage, "kl_coef", 0) > 0
        observed = row.get("policy/kl_ref" if not in_reward else "kl/behaviour_ref")
        if observed is None:
            return
        error = max(-0.2, min(0.2, observed / k.target - 1))
        factor = 1 + error * self.recipe.rollout.prompts_per_step * self.recipe.rollout.samples_per_prompt / k.horizon
        if in_reward:
            self.advantage.kl_coef *= factor
            row["kl/coef"] = self.advantage.kl_coef
        else:
            self.kl_coef *= factor
            row["kl/coef"] = self.kl_coef

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
