"""Export a run's policy as a standard Hugging Face folder that loads without polo.

``AutoModelForCausalLM.from_pretrained(OUT)`` and ``AutoTokenizer.from_pretrained(OUT)`` read an export: it holds
config.json, model.safetensors, generation_config.json, the tokenizer files (with its chat template, if it has
one) and ``polo_export.json`` (the run, step and whether LoRA was merged). A LoRA policy is exported merged
(``merge_lora``: ``W + ΔW``, a plain model) or as its base weights plus ``adapter/``, a PEFT adapter folder
(``PeftModel.from_pretrained(model, OUT / "adapter")``).

An export is written into a temporary sibling folder and renamed into place, so OUT never holds a partial
export. An existing OUT is replaced only when it is empty or a previous export (it has ``polo_export.json``);
any other folder or file is refused. ``FinalExport`` writes ``RUN/final/`` (LoRA merged) when training ends.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import torch

from polo.core.registry import ConfigError
from polo.policy.lora import apply_lora, is_lora
from polo.policy.policy import Policy
from polo.policy.kinds import policy_class
from polo.train.callbacks import Callback
from polo.dist.fsdp import is_sharded_checkpoint, load_unsharded
from polo.train.checkpoint import CheckpointError, checkpoint_steps, latest_checkpoint, load_weights, verify_checkpoint
from polo.train.config import Recipe, load_recipe
from polo.train.files import check_replaceable_dir, install_dir, temporary_dir
from polo.train.run import build_role

if TYPE_CHECKING:
    from polo.train.trainer import Trainer

EXPORT_INFO = "polo_export.json"
FINAL_DIR = "final"


def save_export(policy: Policy, out: str | Path, info: dict[str, Any], *, merge_lora: bool) -> Path:
    """Write ``policy`` (``Policy.save``) and ``info`` (``polo_export.json``) to ``out`` atomically, replacing
    an empty folder or a previous export there."""
    out = Path(out)
    check_replaceable_dir(out, EXPORT_INFO, "export folder")
    tmp = temporary_dir(out)
    try:
        policy.save(tmp, merge_lora=merge_lora)
        (tmp / EXPORT_INFO).write_text(json.dumps({**info, "merged_lora": merge_lora and is_lora(policy.model)},
                                                  indent=2) + "\n")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    install_dir(tmp, out)
    return out


def select_checkpoint(run_dir: Path, step: int | None, log: Callable[[str], Any]) -> Path:
    """``checkpoints/step_N`` for ``step`` (it must verify), or the newest checkpoint that verifies."""
    if step is None:
        ckpt = latest_checkpoint(run_dir, log)
        if ckpt is None:
            raise ConfigError(f"{run_dir} has no checkpoint that verifies")
        return ckpt
    steps = checkpoint_steps(run_dir)
    if step not in steps:
        available = f"available steps: {', '.join(map(str, steps))}" if steps else "it has no checkpoint at all"
        raise ConfigError(f"{run_dir} has no checkpoint of step {step}; {available}")
    reason = verify_checkpoint(steps[step])
    if reason is not None:
        raise CheckpointError(f"{steps[step]} does not verify: {reason}")
    return steps[step]


def build_run_policy(recipe: Recipe) -> Policy:
    """The run's policy with untrained weights (a checkpoint supplies them): ``model.path``, or the built-in
    model of ``model.kind`` (no warm start needed); LoRA-wrapped, and wrapped by the roles that change the
    policy (``Role.wraps_policy``: NLPO's action mask, LambdaMix's adapters), as in training."""
    lora = recipe.model.lora if recipe.model.lora.r > 0 else None
    kind = policy_class(recipe.model.kind)
    with torch.random.fork_rng(devices=[]):  # initial weights are overwritten: draw nothing from the caller's RNG
        if recipe.model.path is not None:
            policy = kind.load(recipe.model.path, lora=lora, chat_template=recipe.model.chat_template)
        else:
            policy = kind.build_tiny(recipe.model)
            if lora:
                policy.model = apply_lora(policy.model, lora)
        for name in recipe.roles:
            role = build_role(recipe, name)
            if role.wraps_policy:
                policy = role.wrap(policy, role.build(policy))
    return policy


def checkpoint_policy(run_dir: Path, recipe: Recipe, step: int | None = None,
                      log: Callable[[str], Any] = print) -> tuple[Policy, Path]:
    """The run's policy (``build_run_policy``) with the weights of checkpoint ``step`` (default: the newest that
    verifies), and that checkpoint's folder. Weights only: nothing is unpickled."""
    ckpt = select_checkpoint(run_dir, step, log)
    policy = build_run_policy(recipe)
    try:
        weights = load_weights(ckpt)
        if "policy" in weights or not is_sharded_checkpoint(ckpt):
            policy.load_state_dict(weights["policy"])
        else:  # a sharded run's: its DCP shards, read whole in this process
            load_unsharded(ckpt, "policy", policy)
    except (KeyError, RuntimeError) as err:
        raise CheckpointError(f"{ckpt} does not hold weights of the model {run_dir / 'config.yaml'} describes: "
                              f"{str(err).splitlines()[0]}") from None
    return policy, ckpt


def export_run(run_dir: str | Path, out_dir: str | Path, step: int | None = None, merge_lora: bool = False,
               log: Callable[[str], Any] = print) -> Path:
    """Write the policy of ``run_dir``'s checkpoint (``step``, default the newest that verifies) to ``out_dir`` as
    a Hugging Face folder (see the module docstring); returns ``out_dir``."""
    run = Path(run_dir)
    if not (run / "config.yaml").is_file():
        raise ConfigError(f"{run} is not a run folder (no config.yaml)")
    policy, ckpt = checkpoint_policy(run, load_recipe(run / "config.yaml"), step, log)
    out = save_export(policy, out_dir, {"run": str(run.resolve()), "checkpoint": ckpt.name,
                                        "step": int(ckpt.name.removeprefix("step_"))}, merge_lora=merge_lora)
    log(f"exported {ckpt} to {out}")
    return out


class FinalExport(Callback):
    """Writes ``RUN/final/`` when training ends: the trained policy, LoRA merged, loadable with
    ``AutoModelForCausalLM.from_pretrained`` (a previous ``final/``, e.g. before a resume, is replaced)."""

    def on_train_end(self, trainer: Trainer, rows: list[dict[str, Any]]) -> None:
        policy = trainer.policy
        if trainer.sharded:  # rank 0 alone: the policy of the last checkpoint (the last step is always saved)
            policy, _ = checkpoint_policy(trainer.run_dir, trainer.recipe, trainer.step_count, trainer.log)
        out = save_export(policy, trainer.run_dir / FINAL_DIR,
                          {"run": str(trainer.run_dir.resolve()), "step": trainer.step_count}, merge_lora=True)
        trainer.log(f"final model: {out}")
