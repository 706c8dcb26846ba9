"""TRL ``GRPOConfig`` fields and verl keys with the polo keys that do the same (docs/config.md's last table).

Names were read from TRL ``trl/trainer/grpo_config.py`` and verl ``verl/trainer/ppo/core_algos.py`` /
``verl/workers/fsdp_workers.py``. ``polo`` holds recipe keys (``kl.coef``) or overrides (``aggregation=token_mean``);
a test checks that each one is a valid key or a valid override.
"""
from __future__ import annotations

from typing import NamedTuple


class Equivalent(NamedTuple):
    framework: str
    name: str
    polo: tuple[str, ...]
    note: str = ""


TRL, VERL = "TRL", "verl"
EQUIVALENTS: list[Equivalent] = [
    Equivalent(TRL, "num_generations", ("rollout.samples_per_prompt",), "Completions per prompt (G)."),
    Equivalent(TRL, "max_completion_length", ("rollout.max_new_tokens",),
               "polo's default is the task's longest correct answer + 1 (EOS)."),
    Equivalent(TRL, "max_prompt_length", (),
               "No equivalent, and gone from recent TRL. polo never truncates a prompt: each prompt plus "
               "`rollout.max_new_tokens` must fit the model's context, checked before training."),
    Equivalent(TRL, "beta", ("kl.coef",),
               "KL loss coefficient: TRL adds β·k3 to every token's loss before aggregation; polo adds "
               "`kl.coef · agg(kl.name)` with the same aggregation and k3 by default. 0 (both defaults) loads no "
               "reference model."),
    Equivalent(TRL, "epsilon", ("policy_loss.clip_low",),
               "Lower clip range of `ppo_clip`. TRL's `epsilon_high` defaults to `epsilon`; polo's `clip_high` has "
               "its own default (0.2), so set both when changing it."),
    Equivalent(TRL, "epsilon_high", ("policy_loss.clip_high",),
               "With `loss_type=\"cispo\"` it is CISPO's ε_max: `policy_loss.eps_max` of `cispo`."),
    Equivalent(TRL, 'loss_type="grpo"', ("aggregation=seq_mean_token_mean",),
               "Mean over each completion's tokens, then over completions."),
    Equivalent(TRL, 'loss_type="dapo"', ("aggregation=token_mean",),
               "TRL's default and polo's: Σ token losses / active tokens of the whole optimizer step."),
    Equivalent(TRL, 'loss_type="bnpo"', ("aggregation=token_mean",),
               "Not 1:1: TRL divides by the active tokens of each local (per-device micro-)batch, polo by those of "
               "the whole optimizer step; equal with one micro-batch per step."),
    Equivalent(TRL, 'loss_type="dr_grpo"', ("aggregation=seq_mean_token_sum_norm",),
               "Σ token losses / (completions × L): TRL's L is `max_completion_length`, polo's "
               "`aggregation.max_length`, by default `rollout.max_new_tokens`. Dr.GRPO also drops the std scaling "
               "(`scale_rewards`); the `dr_grpo` recipe does both."),
    Equivalent(TRL, 'loss_type="cispo"', ("policy_loss=cispo", "aggregation=token_mean"), ""),
    Equivalent(TRL, 'loss_type="sapo"', ("policy_loss=sapo",),
               "`sapo_temperature_pos` / `sapo_temperature_neg` are `policy_loss.tau_pos` / `policy_loss.tau_neg`."),
    Equivalent(TRL, "gradient_accumulation_steps", ("train.micro_batch_size",),
               "Not 1:1: TRL counts micro-batches per optimizer step, polo sets rows per micro-batch "
               "(prompts_per_step × samples_per_prompt / minibatches / gradient_accumulation_steps)."),
    Equivalent(TRL, "per_device_train_batch_size", ("train.micro_batch_size",),
               "Completions per forward/backward; polo runs one process, so it is the whole micro-batch."),
    Equivalent(TRL, "steps_per_generation", ("train.minibatches",),
               "Not 1:1: TRL counts micro-steps per generation batch (default `gradient_accumulation_steps`: one "
               "optimizer step); polo counts optimizer steps, `minibatches = steps_per_generation / "
               "gradient_accumulation_steps`."),
    Equivalent(TRL, "generation_batch_size", ("rollout.prompts_per_step",),
               "TRL counts completions: `prompts_per_step = generation_batch_size / num_generations`."),
    Equivalent(TRL, "num_iterations", ("train.epochs",), "Passes over each rollout batch (μ)."),
    Equivalent(TRL, "scale_rewards", ("advantage.scale_by_std",),
               "`\"group\"`/True: `grpo` with `scale_by_std: true` (the default); `\"none\"`/False: `scale_by_std: "
               "false` (or `advantage=dr_grpo`); `\"batch\"` has no exact equivalent (`reinforce_pp_baseline` "
               "subtracts the group mean and whitens over the batch's tokens)."),
    Equivalent(TRL, "learning_rate", ("optim.lr",), "TRL's default 1e-6 suits pretrained LLMs; polo's 5e-4 the "
               "built-in tiny model."),
    Equivalent(TRL, "temperature", ("rollout.temperature",), ""),
    Equivalent(TRL, "top_p", ("rollout.top_p",), ""),
    Equivalent(TRL, "top_k", ("rollout.top_k",), "0 disables top-k in both."),
    Equivalent(TRL, "mask_truncated_completions", ("rollout.mask_truncated",), ""),
    Equivalent(TRL, "reward_weights", ("rewards",),
               "TRL: a list parallel to `reward_funcs`; polo: each entry of `rewards` carries its weight "
               "(`rewards: [{name: correct, weight: 1.0}]`)."),
    Equivalent(TRL, 'importance_sampling_level="sequence"', ("policy_loss=gspo",),
               "Sequence-level ratio (GSPO); polo's `gspo` uses GSPO's small clip ranges by default."),
    Equivalent(VERL, "data.train_batch_size", ("rollout.prompts_per_step",), "Prompts per step."),
    Equivalent(VERL, "actor_rollout_ref.rollout.n", ("rollout.samples_per_prompt",), ""),
    Equivalent(VERL, "actor_rollout_ref.actor.ppo_mini_batch_size", ("train.minibatches",),
               "verl gives the minibatch size in prompts; polo the count: `minibatches = train_batch_size / "
               "ppo_mini_batch_size`."),
    Equivalent(VERL, "actor_rollout_ref.actor.ppo_epochs", ("train.epochs",), ""),
    Equivalent(VERL, "actor_rollout_ref.actor.clip_ratio_low", ("policy_loss.clip_low",),
               "verl's default is `clip_ratio` (0.2)."),
    Equivalent(VERL, "actor_rollout_ref.actor.clip_ratio_high", ("policy_loss.clip_high",),
               "verl's default is `clip_ratio` (0.2)."),
    Equivalent(VERL, "actor_rollout_ref.actor.clip_ratio_c", ("policy_loss.dual_clip",),
               "Dual-clip bound for negative advantages (verl 3.0; polo's `ppo_clip` default None: off)."),
    Equivalent(VERL, "actor_rollout_ref.actor.loss_agg_mode", ("aggregation",),
               "`token-mean` → `token_mean`, `seq-mean-token-sum` → `seq_mean_token_sum`, `seq-mean-token-mean` → "
               "`seq_mean_token_mean`, `seq-mean-token-sum-norm` → `seq_mean_token_sum_norm` (verl divides by the "
               "batch's padded response length, polo by `rollout.max_new_tokens` unless `aggregation.max_length`)."),
    Equivalent(VERL, "actor_rollout_ref.actor.use_kl_loss", ("kl.coef",),
               "polo has no switch: the KL loss term is on when `kl.coef > 0`."),
    Equivalent(VERL, "actor_rollout_ref.actor.kl_loss_coef", ("kl.coef",),
               "Used only with `use_kl_loss=True` in verl."),
    Equivalent(VERL, "actor_rollout_ref.actor.kl_loss_type", ("kl.name",),
               "`kl`/`k1` → `k1`, `mse`/`k2` → `k2`, `low_var_kl`/`k3` → `k3` (verl also clamps it to ±10); `abs` "
               "and the `+` suffix (straight-through k2 gradient) have no equivalent."),
    Equivalent(VERL, "algorithm.adv_estimator", ("advantage",),
               "Same names for `gae`, `grpo`, `rloo`, `remax`, `opo`, `gpg`, `grpo_passk`; `reinforce_plus_plus` → "
               "`reinforce_pp`, `reinforce_plus_plus_baseline` → `reinforce_pp_baseline`."),
    Equivalent(VERL, "algorithm.norm_adv_by_std_in_grpo", ("advantage.scale_by_std",), ""),
    Equivalent(VERL, "algorithm.use_kl_in_reward", ("advantage.kl_coef",),
               "KL in the reward is a knob of the advantages that support it (`gae`, `reinforce_pp`, ...); "
               "`algorithm.kl_ctrl.kl_coef` is its value."),
    Equivalent(VERL, "algorithm.kl_ctrl.target_kl", ("kl.target", "kl.horizon"),
               "With `kl_ctrl.type=adaptive`; `kl_ctrl.horizon` is `kl.horizon` (10000 in both)."),
    Equivalent(VERL, "actor_rollout_ref.actor.entropy_coeff", ("entropy_coef",), ""),
    Equivalent(VERL, "actor_rollout_ref.actor.optim.lr", ("optim.lr",), ""),
]
