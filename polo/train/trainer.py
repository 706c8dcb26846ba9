"""The training loop: prompt sampler → engine rollouts → rewards → shaping → inputs → advantages → token
credit → minibatch updates → component hooks.

One ``Trainer.step`` is one pass of the pipeline (docs/pipeline.md). Everything particular lives in
registries: the engine (``engine.name``), the input providers that supply what the chosen components declare
(``needs()``), the model roles those providers and the engine need (built only then), the components
themselves. Everything random (data order, sampling, minibatch shuffles) draws from generators that are
checkpointed together with every component's and role's state, so ``--resume`` continues a killed run bit
for bit.
"""
from __future__ import annotations

import copy
import math
import random
import time
from dataclasses import fields
from functools import partial
from pathlib import Path
from typing import Any, Sequence

import torch

from polo.core.batch import RolloutBatch, concat_batches
from polo.core.context import StepContext, TrainingContext
from polo.core.registry import ConfigError
from polo.dist.data_parallel import DataParallel, NoMetrics, process_group_backend
from polo.dist.fsdp import ShardedModules, shard_run
from polo.policy.policy import DTYPES, Policy, resolve_device
from polo.roles.base import RoleResources
from polo.policy.kinds import policy_class
from polo.engines.base import EngineSetup
from polo.inputs.base import ProviderContext
from polo.tasks import Example, build_task
from polo.tasks.reward_calls import RewardContext, TrainerState
from polo.tasks.rewards import RewardSpec, rule_scores
from polo.train.async_rollouts import AsyncRollouts
from polo.train.builtin_callbacks import builtin_callbacks
from polo.train.callbacks import Callback
from polo.train.checkpoint import (CheckpointError, begin_checkpoint, finish_checkpoint, latest_checkpoint,
                                   load_checkpoint, prune_checkpoints, save_checkpoint)
from polo.train.config import (Recipe, config_changes, default_run_dir, load_recipe, load_run_config, save_config,
                               with_rewards)
from polo.train.context_check import check_builtin_context, check_context, run_prompts
from polo.train.critics import Critics
from polo.train.data import PromptStream
from polo.train.inputs import check_task_inputs, provide_inputs
from polo.train.kl_control import KlCoefficients
from polo.train.lock import RunLock
from polo.train.metrics import MetricsLog
from polo.train.plots import plot_run
from polo.train.reward_probe import probe_rewards
from polo.train.run import Run
from polo.train.run_warnings import chat_template_warning, data_warnings
from polo.train.scale_out import start_rollout_workers
from polo.train.schedule import lr_multiplier
from polo.train.stats import advantage_diagnostics, rollout_metrics
from polo.train.update import LossTerms, Updater, UpdateSettings
from polo.train.warm_start import ensure_warm_start, warm_start_with


class NonFiniteError(RuntimeError):
    """Too many optimizer steps had a non-finite loss or gradient; the run stops, its last checkpoint clean."""


def load_policy(recipe: Recipe, task, prompts: Sequence[str | Example], log=print,
                trained: Sequence[Example] = ()) -> Policy:
    """The recipe's checkpoint, or the warm-started built-in model, on ``model.device`` in ``model.dtype`` (and
    with ``train.gradient_checkpointing``); ``prompts`` (all a run will use) must fit its context with
    ``max_new_tokens``, and so must what the run's providers and components render for the ``trained`` examples
    (polo.train.context_check), checked, like the device, before the warm start trains anything."""
    device = resolve_device(recipe.model.device)
    max_new = max_new_tokens(recipe, task)
    kind = policy_class(recipe.model.kind)
    if recipe.model.path is None:
        check_builtin_context(recipe, task, prompts, trained, max_new)
    path = recipe.model.path or ensure_warm_start(recipe, task, log)
    lora = recipe.model.lora if recipe.model.lora.r > 0 else None
    policy = kind.load(path, lora=lora, chat_template=recipe.model.chat_template, device=device,
                       compute_dtype=DTYPES[recipe.model.dtype])
    if recipe.train.gradient_checkpointing:
        policy.enable_gradient_checkpointing()
    policy.pack_rows = recipe.train.pack_rows
    policy.compile_decode = recipe.rollout.compile_decode
    if recipe.model.chat_template and not policy.chat_template:
        log(chat_template_warning(path))
    if recipe.model.path is not None:
        check_context(policy, run_prompts(recipe, task, prompts, trained, max_new, policy),
                      f"max_position_embeddings in {path}/config.json", "use a model with a longer context")
    return policy


def set_threads(recipe: Recipe) -> None:
    threads = recipe.train.threads or (1 if recipe.model.path is None else None)
    if threads:
        torch.set_num_threads(threads)


def max_new_tokens(recipe: Recipe, task) -> int:
    return recipe.rollout.max_new_tokens or task.max_completion_chars + 1


def seed_run(recipe: Recipe) -> None:
    """torch's CPU threads, then torch's and Python's global RNGs seeded with ``seed``."""
    set_threads(recipe)
    torch.manual_seed(recipe.seed)
    random.seed(recipe.seed)


def build_models(run: Run, policy: Policy, resources: RoleResources) -> tuple[Policy, dict[str, torch.nn.Module]]:
    """Each planned role bound to the run's ``resources`` and built, in plan order; then the policy wrapped by
    every role that wraps it. Returns the (wrapped) policy and the role models by name."""
    roles = run.trained_roles
    for role in roles.values():
        role.bind(resources)
    models = {name: role.build(policy) for name, role in roles.items()}
    for name, role in roles.items():
        policy = role.wrap(policy, models[name])
    return policy, models


def build_optimizer(policy: Policy, recipe: Recipe) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW over the policy's trainable parameters (fused when they all live on cpu or cuda) and its learning-rate
    schedule over ``train.steps``."""
    o = recipe.optim
    params = [p for p in policy.parameters() if p.requires_grad]
    fused = all(p.device.type in ("cpu", "cuda") for p in params)  # one kernel for all parameters
    optimizer = torch.optim.AdamW(params, lr=o.lr, betas=o.betas, weight_decay=o.weight_decay, fused=fused)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lr_multiplier(o, recipe.train.steps))


def update_settings(recipe: Recipe, run: Run, max_new: int) -> UpdateSettings:
    """The updater's settings: the loop's epochs and micro-batching, clip, temperature, length cap and whether a
    component needs whole groups."""
    t = recipe.train
    return UpdateSettings(t.epochs, t.minibatches, t.micro_batch_size, recipe.optim.grad_clip,
                          recipe.rollout.temperature, max_new, t.skip_zero_advantage_rows,
                          any(c.whole_groups for c in run.components.values()), t.micro_batch_tokens)


def loss_terms(recipe: Recipe, run: Run) -> LossTerms:
    """The policy's loss terms of ``run``."""
    return LossTerms(run.policy_loss, run.aggregation, run.kl, recipe.entropy_coef, run.regularizers)


def kl_coefficients(recipe: Recipe, advantage) -> KlCoefficients:
    """The run's KL coefficients at the start: the loss term's ``kl.coef`` and the advantage's KL-in-reward
    ``kl_coef`` (0 when it puts none in the reward), with the adaptive controller's settings."""
    in_reward = advantage.kl_coef if advantage.kl_in_reward else 0.0
    r = recipe.rollout
    return KlCoefficients(recipe.kl.coef, in_reward, recipe.kl.target, recipe.kl.horizon,
                          r.prompts_per_step * r.samples_per_prompt)


def silent(message: str) -> None:
    """A log that writes nothing (data-parallel ranks other than 0)."""


class Trainer:
    """One training run of ``recipe`` in ``run_dir``; ``callbacks`` (``polo.train.callbacks.Callback``) run at
    fixed points of every step after the built-in ones the recipe asks for."""

    def __init__(self, recipe: Recipe | str, run_dir: Path | str | None = None, log=print,
                 callbacks: Sequence[Callback] = (), rewards: Sequence[Any] | None = None):
        """``recipe``: a Recipe or a shipped recipe's name or path; ``run_dir``: default
        ``output_dir/NAME_sSEED_TIME``; ``rewards`` replaces the recipe's (names, functions, with weights)."""
        recipe = recipe if isinstance(recipe, Recipe) else load_recipe(recipe)
        if rewards is not None:
            recipe = with_rewards(recipe, rewards)
        self.data_parallel = DataParallel.from_environment(recipe.dist.learner_backend)
        main = self.data_parallel.is_main  # only rank 0 logs, runs the callbacks and writes the run folder
        self.recipe, self.log = recipe, log if main else silent
        self.run_dir = Path(self.data_parallel.same(str(run_dir or default_run_dir(recipe))))
        self.callbacks = [*builtin_callbacks(recipe), *callbacks] if main else []
        seed_run(recipe)
        pool = self.load_data()
        policy = self.data_parallel.rank0_first(  # rank 0 builds the warm start, the others then load it
            partial(load_policy, recipe, self.task, pool + self.eval_examples, self.log, pool))
        self.data_parallel.sync_random_state()
        self.data_parallel.check_device(policy.device)
        self.built = run = recipe.take_run()  # every component, role and the input plan
        self.config_tree = run.tree()  # every setting filled in: config.yaml, each checkpoint, resume check
        self.components, self.engine, self.roles = run.components, run.engine, run.trained_roles
        self.data_parallel.check(self.components, recipe.dist.backend)
        resources = RoleResources(warm_start=partial(warm_start_with, recipe, self.task, self.log),
                                  temperature=recipe.rollout.temperature, rule_scores=partial(rule_scores, self.task))
        self.policy, self.models = build_models(run, policy, resources)
        self.data_parallel.broadcast_weights([self.policy, *self.models.values()])
        self.sharded = self.shard_models(run)
        self.max_new_tokens = max_new_tokens(recipe, self.task)
        self.reward_context = RewardContext(TrainerState(max_steps=recipe.train.steps))
        self.workers = self.start_engine()
        self.async_rollouts, self.stopped = self.start_async(), False
        self.optimizer, self.scheduler = build_optimizer(self.policy, recipe)
        self.critics = Critics([(n, role, self.models[n]) for n, role in self.roles.items() if role.trainable],
                               recipe.optim.grad_clip)
        self.kl = kl_coefficients(recipe, run.advantage)
        self.stream = PromptStream(pool, seed=recipe.seed)
        self.sample_generator = torch.Generator().manual_seed(recipe.seed + 1)
        self.shuffle_generator = torch.Generator().manual_seed(recipe.seed + 2)
        self.inputs = ProviderContext(self.policy, self.models, self.engine, self.task, self.components,
                                      run.plan.needs, recipe.rollout.temperature, self.sample_generator)
        self.updater = Updater(self.policy, self.optimizer, loss_terms(recipe, run), self.critics,
                               update_settings(recipe, run, self.max_new_tokens), self.shuffle_generator,
                               run.optimizer_hook, self.data_parallel, lockstep=bool(self.sharded))
        self.replay: list = []
        self.nonfinite_skips = 0
        self.step_count = 0
        self.elapsed = 0.0
        self.metrics = MetricsLog(self.run_dir / "metrics.jsonl") if main else NoMetrics()

    def load_data(self) -> list[Example]:
        """The task, its reward components and held-out examples; returns the training pool. Every reward scores
        two demonstrations first, so an unknown or broken one fails before anything is trained."""
        recipe = self.recipe
        self.task = build_task(recipe.task)
        specs = recipe.rewards or [{"name": s.name, "weight": s.weight} for s in self.task.default_rewards]
        self.reward_specs = [RewardSpec.of(s) for s in specs]
        run = recipe.built()
        check_task_inputs(run.plan, run.components, self.task)  # e.g. a gold-answer probe on an environment without one
        for role in run.trained_roles.values():  # e.g. an HTTP judge's server answers
            role.preflight(self.log)
        pool = self.task.examples("train", recipe.train.train_pool, seed=recipe.seed)
        self.eval_examples = self.task.examples("test", recipe.train.eval_size, seed=recipe.seed)
        probe_rewards(self.task, self.reward_specs, pool, recipe.model.path, recipe.train.steps)
        for message in data_warnings(pool, self.eval_examples, builtin_tokenizer=recipe.model.path is None,
                                     key=self.task.problem_key):
            self.log(message)
        return pool

    def shard_models(self, run: Run) -> ShardedModules:
        """``dist.shard: fsdp``: the policy and the role models sharded over the learner ranks (polo.dist.fsdp);
        else nothing is sharded."""
        d = self.recipe.dist
        if d.shard == "replicate":
            return ShardedModules()
        wrappers = [name for name, role in run.trained_roles.items() if role.wraps_policy]
        return shard_run(d.fsdp, self.data_parallel.world, process_group_backend(d.learner_backend), self.policy,
                         self.models, wrappers)

    def start_engine(self):
        """Set the engine up with the task, rewards, sampling settings and role models; start the Ray rollout
        workers under ``dist.backend: ray`` (returned; None otherwise), which then score the learner's own
        rollouts too (``before_training``, providers)."""
        r = self.recipe.rollout
        self.engine.setup(EngineSetup(self.task, self.reward_specs, r.samples_per_prompt, self.max_new_tokens,
                                      r.temperature, r.top_p, r.top_k, self.reward_context, self.models))
        if self.recipe.dist.backend != "ray":
            return None
        workers = start_rollout_workers(self.recipe, self.policy, self.reward_specs, self.max_new_tokens)
        self.engine.settings.scorer = workers.scorer
        return workers

    def start_async(self) -> AsyncRollouts | None:
        """The rollout thread of asynchronous RL (``train.async_staleness``); None when synchronous."""
        staleness = self.recipe.train.async_staleness
        if not staleness:
            return None
        if self.data_parallel.world > 1:
            raise ConfigError(f"train.async_staleness={staleness} with a data-parallel learner "
                              f"(WORLD_SIZE={self.data_parallel.world}): the rollout thread's collectives would "
                              f"interleave with the update's; use one learner (and Ray rollout workers)")
        return AsyncRollouts(self.policy, staleness, self.produce, self.inputs_state)

    # ----------------------------------------------------------------- state
    def checkpointed_models(self) -> dict[str, torch.nn.Module]:
        """The modules a checkpoint holds, by their name in it: the policy, the trained roles, the frozen roles
        that change (``Role.checkpointed``)."""
        models = {"policy": self.policy, **{name: model for name, _, model, _ in self.critics.members}}
        models.update({f"role.{n}": self.models[n] for n, role in self.roles.items()
                       if role.checkpointed and not role.trainable})
        return models

    def sharded_checkpoint(self) -> tuple[dict[str, torch.nn.Module], dict[str, torch.optim.Optimizer]]:
        """The checkpointed modules that are sharded (saved with DCP, not as safetensors) and their optimizers."""
        optimizers = {"policy": self.optimizer, **self.critics.optimizers()}
        modules = {name: model for name, model in self.checkpointed_models().items() if self.sharded.holds(model)}
        return modules, {name: optimizers[name] for name in modules if name in optimizers}

    def state(self) -> tuple[dict, dict]:
        """The checkpoint's weights (name → state dict, the sharded modules left to ``sharded_checkpoint``) and
        the trainer state (optimizer states of sharded modules left out too)."""
        sharded, _ = self.sharded_checkpoint()
        weights = {name: model.state_dict() for name, model in self.checkpointed_models().items()
                   if name not in sharded}
        state: dict[str, Any] = {
            "step": self.step_count,
            "elapsed": self.elapsed,
            "kl": self.kl.state_dict(),
            "optimizer": None if "policy" in sharded else self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "critic_optimizers": {k: v for k, v in self.critics.state_dict().items() if k not in sharded},
            "stream": self.stream.state_dict(),
            "sample_generator": self.sample_generator.get_state(),
            "shuffle_generator": self.shuffle_generator.get_state(),
            "torch_rng": torch.get_rng_state(),
            "python_rng": random.getstate(),
            "components": {name: comp.state_dict() for name, comp in self.components.items()},
            "replay": [{f.name: getattr(b, f.name) for f in fields(b)} for b in self.replay],
            "nonfinite_skips": self.nonfinite_skips,
            "config": self.config_tree,
        }
        in_flight = self.async_rollouts.resume_state() if self.async_rollouts else None
        if in_flight is not None:  # resume before the batches still being generated: they are regenerated
            state["stream"], state["sample_generator"] = in_flight["stream"], in_flight["sample_generator"]
            state["components"]["prompt_sampler"] = in_flight["prompt_sampler"]
        return weights, state

    def save(self) -> Path | None:
        """Write a checkpoint (rank 0; with sharded modules every rank writes its shards into the folder rank 0
        opens, and rank 0 seals it). Returns its path on rank 0, None on the others."""
        dp = self.data_parallel
        if not (dp.is_main or self.sharded):
            return None
        weights, state = self.state()
        if not self.sharded:
            path = save_checkpoint(self.run_dir, self.step_count, weights, state)
        else:
            tmp = Path(dp.same(str(begin_checkpoint(self.run_dir, self.step_count)) if dp.is_main else None))
            self.sharded.save(tmp, *self.sharded_checkpoint())
            path = finish_checkpoint(tmp, self.step_count, weights, state) if dp.is_main else None
            dp.barrier()  # no rank goes on before the checkpoint is in place
        if dp.is_main:
            prune_checkpoints(self.run_dir, keep=2)
        return path

    def restore(self, path: Path) -> None:
        """Continue from checkpoint ``path``; refused when the recipe differs from the one the run was trained
        with (except ``EXTENDABLE`` keys), naming each differing key."""
        weights, state = load_checkpoint(path)
        changed = config_changes(state["config"], self.config_tree)
        if changed:
            raise ConfigError(f"{self.run_dir / 'config.yaml'} differs from the configuration this run was trained "
                              f"with: {'; '.join(changed)}; put it back or start a new run")
        sharded, optimizers = self.sharded_checkpoint()
        for name, model in self.checkpointed_models().items():
            if name not in sharded:
                model.load_state_dict(weights[name])
        self.critics.load_optimizers(state["critic_optimizers"])
        if state["optimizer"] is not None:
            self.optimizer.load_state_dict(state["optimizer"])
        if self.sharded:
            self.sharded.load(path, sharded, optimizers)
        self.scheduler.load_state_dict(state["scheduler"])
        self.stream.load_state_dict(state["stream"])
        self.sample_generator.set_state(state["sample_generator"])
        self.shuffle_generator.set_state(state["shuffle_generator"])
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["python_rng"])
        for name, comp in self.components.items():
            comp.load_state_dict(state["components"][name])
        self.kl.load_state_dict(state["kl"])
        self.replay = [RolloutBatch(**fields_) for fields_ in state["replay"]]
        self.nonfinite_skips = state["nonfinite_skips"]
        self.step_count, self.elapsed = state["step"], state["elapsed"]
        self.metrics.truncate_after(self.step_count)

    # ----------------------------------------------------------------- one step
    def rollout(self, examples, indices, generator, *, policy=None, **sampling):
        """Scored rollouts of ``examples``: from the Ray rollout workers (``dist.backend: ray``), or from the
        engine in this process with ``policy`` (default: the trained one)."""
        if self.workers is None:
            return self.engine.rollout(policy or self.policy, examples, indices, generator, **sampling)
        got, logged = self.workers.rollout(examples, indices, generator, step=self.step_count, **sampling)
        self.reward_context.log_all(logged)
        return got

    def generate(self, examples, indices, policy=None):
        with self.sharded.gathered():  # each rank decodes its own prompts: no collective in between
            return self.data_parallel.rollout(partial(self.rollout, policy=policy), examples, indices,
                                              self.sample_generator)

    def push_weights(self, policy, version: int) -> None:
        """``policy``'s weights (after ``version`` updates) to where generation runs: the engine's vLLM, the Ray
        rollout workers."""
        self.engine.sync(policy, version)
        if self.workers is not None:
            self.workers.sync(policy, version)

    def produce(self, policy, step: int, version: int):
        """The prompt sampler's batch for ``step`` (1-based), generated by ``policy`` at ``version`` (completed
        updates). Asynchronous RL calls it on its own thread with a snapshot of the weights, pushed first where
        generation runs (vLLM, Ray workers)."""
        if policy is not self.policy:
            self.push_weights(policy, version)
        self.reward_context.state.global_step = step - 1  # the rewards' trainer_state
        return self.built.prompt_sampler.collect(self.stream, partial(self.generate, policy=policy),
                                                         self.recipe.rollout.prompts_per_step,
                                                         self.sample_generator, self.components)

    def inputs_state(self) -> dict[str, Any]:
        """What producing a batch reads and advances: the prompt stream, the sampling generator, the prompt
        sampler's state (copies)."""
        return copy.deepcopy({"stream": self.stream.state_dict(), "sample_generator": self.sample_generator.get_state(),
                              "prompt_sampler": self.built.prompt_sampler.state_dict()})

    def step(self) -> dict[str, float]:
        r, c = self.recipe, self.components
        timings: dict[str, float] = {}
        t = time.perf_counter()
        self.policy.eval()
        if self.async_rollouts is None:
            got, row = self.produce(self.policy, self.step_count + 1, self.step_count)
        else:
            (got, row), lag = self.async_rollouts.take(self.policy, self.step_count + 1)
            row.update(lag)
        self.last_rollouts, batch = got, got.batch
        timings["sample"] = time.perf_counter() - t

        t = time.perf_counter()
        self.shape(batch, after_inputs=False)
        if r.rollout.mask_truncated:
            batch.response_mask = batch.response_mask * ~batch.truncated[:, None]
        provide_inputs(self.inputs, got, self.built.plan)
        self.shape(batch, after_inputs=True)  # shaping terms that read an input (a judge's score)
        row.update(self.inputs.metrics)
        self.inputs.metrics.clear()
        timings["inputs"] = time.perf_counter() - t

        t = time.perf_counter()
        advantage, credit = self.built.advantage, self.built.credit
        result = advantage(batch, kl_coef=self.kl.reward) if advantage.kl_in_reward else advantage(batch)
        batch.advantages, batch.returns = result.advantages, result.returns
        if credit is not None:
            weights = credit(batch)
            batch.advantages = batch.advantages * weights
            row.update(credit.diagnostics(batch, weights))
        row.update(rollout_metrics(batch, got.correct))
        row.update(advantage_diagnostics(batch))
        row.update(result.diagnostics)
        trained = batch if result.keep is None else batch.select(result.keep)
        timings["advantage"] = time.perf_counter() - t

        t = time.perf_counter()
        frozen = self.critics.policy_frozen(self.step_count)
        self.engine.before_update()  # vLLM's sleep mode frees its memory until the push below
        row.update(self.updater.run(concat_batches([trained, *self.replay]), self.kl.loss, frozen))
        self.nonfinite_skips += row["optim/skipped_nonfinite"]
        if self.nonfinite_skips > r.train.max_nonfinite_skips:
            raise NonFiniteError(f"step {self.step_count + 1}: {self.nonfinite_skips} optimizer steps had a "
                                 f"non-finite loss or gradient (more than train.max_nonfinite_skips="
                                 f"{r.train.max_nonfinite_skips}); stopped, the last checkpoint in "
                                 f"{self.run_dir / 'checkpoints'} is untouched")
        if r.train.replay_steps:
            self.replay = [trained, *self.replay][: r.train.replay_steps]
        timings["update"] = time.perf_counter() - t

        t = time.perf_counter()
        done = self.step_count + 1
        context = StepContext(done, self.policy_logp, self.optimizer.param_groups[0]["lr"])
        for comp in c.values():
            row.update(comp.after_update(batch, context))
        row.update(self.kl.adapt(row))
        for name, role in self.roles.items():
            role.on_update(self.models[name], self.policy, done)
            row.update(role.diagnostics(self.models[name], self.policy))
        if self.async_rollouts is None:  # asynchronous: each batch's producer pushes its own snapshot
            self.push_weights(self.policy, done)
        timings["hooks"] = time.perf_counter() - t

        row["optim/lr"] = self.optimizer.param_groups[0]["lr"]
        self.scheduler.step()
        total = sum(timings.values())
        row.update({f"time/{k}": v for k, v in timings.items()})
        row["time/step"] = total
        row["perf/tokens_per_s"] = float(batch.response_mask.sum()) / max(total, 1e-9)
        row.update(self.reward_context.take_metrics())  # what the rewards logged with log_metric
        return row

    def shape(self, batch, after_inputs: bool) -> None:
        """Add each shaping term's reward column: the terms that read no input before the inputs are provided
        (they see the rollout's own response mask), those that read one after."""
        for shaping in self.built.shaping:
            if bool(shaping.needs()) == after_inputs:
                batch.add_reward(shaping.registry_name, shaping(batch, self.max_new_tokens), shaping.weight,
                                 shaping.max_value, shaping.present(batch))

    @torch.no_grad()
    def policy_logp(self, batch) -> torch.Tensor:
        return self.policy.forward_logp(batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask,
                                        temperature=self.recipe.rollout.temperature,
                                        **self.policy.model_inputs(batch))["logp"]

    def before_training(self) -> dict[str, float]:
        """The components' ``before_training`` hooks, once, before the first step of a new run."""
        pool = self.stream.pool

        def rollout(prompt_index: torch.Tensor, samples_per_prompt: int):
            index = prompt_index.tolist()
            return self.engine.rollout(self.policy, [pool[i] for i in index], index, self.sample_generator,
                                       samples_per_prompt=samples_per_prompt).batch

        context = TrainingContext(torch.arange(len(pool)), rollout)
        row: dict[str, float] = {}
        self.policy.eval()
        with self.sharded.gathered():
            for comp in self.components.values():
                row.update(comp.before_training(context))
        row.update(self.reward_context.take_metrics())
        return row

    # ----------------------------------------------------------------- loop
    def evaluate(self) -> dict[str, float]:
        """Held-out greedy accuracy, then each callback's ``on_evaluate`` metrics."""
        t = time.perf_counter()
        with self.async_rollouts.engine_free(self.engine, self.policy, self.step_count) if self.async_rollouts \
                else self.sharded.gathered():
            row = {"eval/greedy_accuracy": self.data_parallel.evaluate(partial(self.engine.evaluate, self.policy),
                                                                       self.eval_examples)}
        row.update({f"eval/{name}": value for name, value in self.engine.evaluation_metrics().items()})
        for callback in self.callbacks:
            row.update(callback.on_evaluate(self, row) or {})
        row["time/eval"] = time.perf_counter() - t
        return row

    def write_row(self, row: dict[str, Any]) -> None:
        self.metrics.write(row)
        for callback in self.callbacks:
            callback.on_log(self, row)

    def run(self, progress=None) -> list[dict]:
        """Train to ``train.steps`` (or the time budget), holding the run folder's lock: one writer per folder
        (of data-parallel learners, rank 0; the others write nothing and return no rows)."""
        if self.stopped:
            raise RuntimeError("this Trainer's rollout workers (Ray, or asynchronous RL's thread) stopped when its run "
                               "ended: build a new Trainer, or resume the run folder (polo train --resume)")
        try:
            if not self.data_parallel.is_main:
                return self._run(progress)
            self.run_dir.mkdir(parents=True, exist_ok=True)
            with RunLock(self.run_dir):
                return self._run(progress)
        finally:
            self.close()

    def close(self) -> None:
        """Stop the rollout thread of asynchronous RL and the Ray rollout workers (and the local Ray cluster polo
        started for them), and release the engine's generation (the vLLM server polo started)."""
        if self.async_rollouts is not None:
            self.async_rollouts.close()
            self.stopped = True
        if self.workers is not None:
            self.workers.close()
            self.stopped = True
        self.engine.close()

    def _run(self, progress=None) -> list[dict]:
        r, main = self.recipe, self.data_parallel.is_main
        if main:
            save_config(self.config_tree, self.run_dir)
        for callback in self.callbacks:
            callback.on_train_begin(self)
        if self.step_count == 0:
            self.metrics.truncate_after(-1)
            self.write_row({"step": 0, **self.before_training(), **self.evaluate()})
        budget = r.train.max_minutes * 60 if r.train.max_minutes else math.inf
        title = f"{r.name} ({self.run_dir.name})"
        while self.step_count < r.train.steps and self.elapsed < budget:
            start = time.perf_counter()
            row = self.step()
            self.step_count += 1
            clock = self.data_parallel.same(time.perf_counter() - start)  # rank 0's: every rank stops alike
            last = self.step_count == r.train.steps or self.elapsed + clock >= budget
            if self.step_count % r.train.eval_every == 0 or last:
                row.update(self.evaluate())
            self.elapsed += self.data_parallel.same(time.perf_counter() - start)
            row = {"step": self.step_count, "elapsed_s": self.elapsed, **row}
            for callback in self.callbacks:
                callback.on_step_end(self, row, self.last_rollouts)
            self.write_row(row)
            if progress is not None:
                progress(self.step_count, row)
            if (self.step_count % r.train.save_every == 0 or last) and (path := self.save()) is not None:
                plot_run(self.metrics.read(), self.run_dir / "curves.png", title=title)
                for callback in self.callbacks:
                    callback.on_save(self, path)
        rows = self.metrics.read()
        for callback in self.callbacks:
            callback.on_train_end(self, rows)
        return rows


def resume(run_dir: Path, log=print, overrides: list[str] = ()) -> Trainer:
    """Rebuild the trainer from ``run_dir/config.yaml`` and its last checkpoint; ``overrides`` may only extend
    the run (``train.steps``, ``train.max_minutes``)."""
    recipe = load_run_config(run_dir, overrides)
    trainer = Trainer(recipe, run_dir, log)
    ckpt = latest_checkpoint(run_dir)
    if ckpt is None:
        raise CheckpointError(f"{run_dir} has no checkpoint to resume from; start it again instead")
    trainer.restore(ckpt)
    trainer.log(f"resumed {run_dir} at step {trainer.step_count}")
    return trainer
