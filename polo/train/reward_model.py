"""``polo rm``: train a Bradley–Terry reward model on preference pairs.

Model: ``P(y_w ≻ y_l | x) = σ(r(x, y_w) − r(x, y_l))`` for a chosen ``y_w`` and a rejected ``y_l``; the reward
model (polo.policy.reward_model) is trained, as InstructGPT's is ("Training language models to follow
instructions with human feedback" (arXiv:2203.02155)), by minimising over minibatches of pairs the mean of

    ℓ = −log σ(r_w − r_l − m) + η · (r_w + r_l)²

- ``m = margin · (chosen_score − rejected_score)`` when a pair carries both scores, else 0: a pair whose
  scores differ more must be separated by more ("Llama 2: Open Foundation and Fine-Tuned Chat Models"
  (arXiv:2307.09288) uses such a margin from its preference ratings);
- ``η = center``: a small penalty that keeps the two rewards of a pair summing to about zero, so rewards are
  centred near 0 (BT itself sees only differences, leaving the offset free) ("Helping or Herding? Reward Model
  Ensembles Mitigate but do not Eliminate Reward Hacking" (arXiv:2312.09244)).

AdamW with a linear warm-up, ``epochs`` passes over the training pairs in a seeded order. The held-out pairs are a
second file (``eval_pairs``), or the pairs whose prompt hashes into the ``eval_fraction`` test split (so no
prompt is in both); after every epoch their pair accuracy (strict: ``r_w > r_l``), BT loss and mean margin are
measured. The output folder holds the reward model (``RewardModel.save``, loadable with
``AutoModelForSequenceClassification``), ``polo_reward_model.json`` (settings, pair files, final metrics) and
``metrics.jsonl`` (training rows every ``log_every`` steps, an ``eval/`` row after each epoch); it is written into
a temporary sibling and renamed into place at the end, so it never holds a half-trained model.
"""
from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
from pydantic import Field, ValidationError, field_validator
from torch import Tensor

from polo.core.registry import ConfigError, Settings
from polo.policy.policy import resolve_device
from polo.policy.reward_model import RM_INFO, RewardModel, pair_outcomes
from polo.policy.tiny import TinyModelConfig
from polo.tasks.base import Example, split_of
from polo.tasks.preferences import (RUBRIC_TEMPLATE, check_template, read_pairs, responses, rubric_conditioned,
                                    score_gaps)
from polo.train.config import parse_overrides, validation_message
from polo.train.files import check_replaceable_dir, install_dir, temporary_dir
from polo.train.metrics import MetricsLog
from polo.train.trainer import NonFiniteError


SPLIT_SALT = "reward_model:"
"""Prefix of the prompt in the hash of the held-out split (``split_pairs``)."""


class RewardModelSettings(Settings):
    """Settings of ``polo rm`` (``key=value`` on its command line, e.g. ``tiny.hidden_size=64 lr=1e-4``)."""

    model: str | None = None
    """Starting point: a local causal LM folder (its trunk, with a fresh zero head) or a reward model folder;
    None: the built-in tiny architecture (``tiny``), freshly initialised."""
    tiny: TinyModelConfig = Field(default_factory=TinyModelConfig)
    """Shape of the built-in model (its context is raised to hold the longest pair)."""
    chat_template: bool = False
    """Read each pair through the tokenizer's chat template (a user and an assistant turn), when it has one."""
    epochs: int = Field(1, gt=0)
    """Passes over the training pairs."""
    batch_size: int = Field(32, gt=0)
    """Pairs per optimizer step."""
    lr: float = Field(1e-3, gt=0)
    """AdamW learning rate (after the warm-up); the built-in model learns at ~1e-3, pretrained checkpoints
    usually want ~1e-5."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW weight decay."""
    warmup_steps: int = Field(10, ge=0)
    """Steps of linear learning-rate warm-up."""
    max_grad_norm: float = Field(1.0, gt=0)
    """Gradient-norm clip."""
    margin: float = Field(0.0, ge=0)
    """Scale of the score margin ``m = margin · (chosen_score − rejected_score)``; 0 ignores the scores."""
    center: float = Field(0.01, ge=0)
    """Coefficient ``η`` of the centring penalty ``(r_w + r_l)²``; 0 turns it off."""
    eval_fraction: float = Field(0.1, ge=0, lt=1)
    """Held-out share of the pairs, by prompt hash, when no ``eval_pairs`` file is given (0: no held-out set)."""
    rubric_template: str = RUBRIC_TEMPLATE
    """How a pair's ``user_rubric`` column is put ahead of its prompt (``{rubric}``, ``{prompt}``) for the reward
    model to read; pairs without one are read as they are. ``polo rm-eval`` scores with the same default."""
    eval_batch_size: int = Field(64, gt=0)
    """Texts per no-grad forward when scoring the held-out pairs."""
    log_every: int = Field(10, gt=0)
    """Steps between training rows of metrics.jsonl."""
    seed: int = 0
    """Seeds the built-in model's initialisation and the order of the pairs."""
    device: str = "cpu"
    """Torch device of the model (``cuda``, ``cuda:1``, ...)."""
    threads: int | None = Field(None, gt=0)
    """Torch intra-op threads (None: torch's default)."""

    @field_validator("rubric_template")
    @classmethod
    def _fills_rubric_and_prompt(cls, value: str) -> str:
        return check_template(value)


def load_settings(overrides: list[str] = (), **given: Any) -> RewardModelSettings:
    """The settings ``given`` with ``key=value`` / ``key.sub=value`` overrides applied, validated (a ConfigError
    naming the key)."""
    tree: dict[str, Any] = dict(given)
    for key, value in parse_overrides(list(overrides)):
        *sections, last = key.split(".")
        node = tree
        for section in sections:
            node = node.setdefault(section, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {key!r}: {section!r} is not a section")
        node[last] = value
    try:
        return RewardModelSettings.model_validate(tree)
    except ValidationError as err:
        raise ConfigError("invalid polo rm settings: " + validation_message(err, RewardModelSettings)) from None


def bradley_terry_loss(r_w: Tensor, r_l: Tensor, margin: Tensor | float = 0.0, center: float = 0.0) -> Tensor:
    """``mean(−log σ(r_w − r_l − m) + η · (r_w + r_l)²)`` over pairs (see the module docstring)."""
    return (-F.logsigmoid(r_w - r_l - margin) + center * (r_w + r_l) ** 2).mean()


def score_margins(pairs: list[Example], scale: float) -> Tensor:
    """``[N]`` margins ``scale · (chosen_score − rejected_score)``, 0 for a pair without both scores; a ConfigError
    naming the first pair whose scores are not finite."""
    gaps = torch.tensor(score_gaps(pairs))
    bad = (~gaps.isfinite()).nonzero().flatten().tolist()
    if bad and scale > 0:
        e = pairs[bad[0]]
        raise ConfigError(f"pair {bad[0]} (prompt {e.prompt[:60]!r}): its scores ({gaps[bad[0]]} apart) must be "
                          f"finite numbers for margin={scale}")
    return scale * gaps.nan_to_num(0.0, posinf=0.0, neginf=0.0)


def both_sides(pairs: list[Example]) -> tuple[list[str], list[str]]:
    """``(prompts, responses)`` of ``2N`` texts: every pair's chosen response, then every pair's rejected one."""
    prompts = [e.prompt for e in pairs]
    preferred, dispreferred = responses(pairs)
    return prompts + prompts, preferred + dispreferred


def pair_rewards(rm: RewardModel, pairs: list[Example]) -> tuple[Tensor, Tensor]:
    """``(r_w, r_l)`` ``[N]`` with autograd: chosen and rejected texts of the pairs in one forward."""
    rewards = rm.rewards(*both_sides(pairs))
    return rewards[: len(pairs)], rewards[len(pairs):]


def evaluate_pairs(rm: RewardModel, pairs: list[Example], batch_size: int) -> dict[str, float]:
    """Held-out ``accuracy`` (strict), BT ``loss`` (no margin, no centring) and mean ``margin`` ``r_w − r_l``."""
    rewards = rm.score(*both_sides(pairs), batch_size)
    r_w, r_l = rewards[: len(pairs)], rewards[len(pairs):]
    return {"accuracy": pair_outcomes(r_w, r_l).mean().item(),
            "loss": bradley_terry_loss(r_w, r_l).item(), "margin": (r_w - r_l).mean().item()}


def split_pairs(pairs: list[Example], eval_pairs: list[Example] | None, eval_fraction: float,
                where: str) -> tuple[list[Example], list[Example]]:
    """``(train, held-out)``: all pairs and ``eval_pairs``, or a split of ``pairs`` by prompt hash (salted: pairs
    built from a task's training split, whose prompts all hash into ``train`` by the task's own rule, still split)."""
    if eval_pairs is not None:
        return pairs, eval_pairs
    if eval_fraction == 0:
        return pairs, []
    sides = [split_of(SPLIT_SALT + e.prompt, eval_fraction) for e in pairs]
    train = [e for e, side in zip(pairs, sides) if side == "train"]
    held = [e for e, side in zip(pairs, sides) if side == "test"]
    if not train or not held:
        raise ConfigError(f"{where}: eval_fraction={eval_fraction} splits its {len(pairs)} pairs into {len(train)} "
                          f"training and {len(held)} held-out pairs (by prompt hash); both must be non-empty: give "
                          f"more pairs, another eval_fraction (0: no held-out set) or --eval-pairs FILE")
    return train, held


def build_reward_model(settings: RewardModelSettings, pairs: list[Example]) -> RewardModel:
    """The starting reward model on ``settings.device``: ``settings.model``'s folder, or the built-in model sized
    to hold ``pairs`` (initialised from ``settings.seed``, without touching the caller's random state)."""
    device = resolve_device(settings.device)
    if settings.model is not None:
        return RewardModel.init_from(settings.model, chat_template=settings.chat_template).to(device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        return RewardModel.builtin(settings.tiny, both_sides(pairs)).to(device)


def train_reward_model(pairs_path: str | Path, out: str | Path, settings: RewardModelSettings | None = None,
                       eval_path: str | Path | None = None, log: Callable[[str], Any] = print) -> dict[str, Any]:
    """Train a reward model on the pairs of ``pairs_path`` and write it to ``out`` (see the module docstring);
    returns the final held-out metrics (``eval/...``, empty without a held-out set) and the step count."""
    settings = settings or RewardModelSettings()
    out = Path(out)
    check_replaceable_dir(out, RM_INFO, "reward model folder")
    if settings.threads:
        torch.set_num_threads(settings.threads)
    train, held = split_pairs(read_pairs(pairs_path), read_pairs(eval_path) if eval_path else None,
                              settings.eval_fraction, str(pairs_path))  # split by the prompt alone
    train, held = (rubric_conditioned(part, settings.rubric_template) for part in (train, held))
    rm = build_reward_model(settings, train + held)
    rm.token_ids(*both_sides(train + held))  # every text fits the context: checked before training
    log(f"reward model: {sum(p.numel() for p in rm.parameters()):,} parameters, {len(train)} training and "
        f"{len(held)} held-out pairs, {settings.epochs} epoch(s) of {math.ceil(len(train) / settings.batch_size)} steps")
    optimizer = torch.optim.AdamW(rm.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / (settings.warmup_steps + 1)))
    generator = torch.Generator().manual_seed(settings.seed)
    margins = score_margins(train, settings.margin).to(rm.device)
    tmp = temporary_dir(out)
    metrics, step, final = MetricsLog(tmp / "metrics.jsonl"), 0, {}
    try:
        for epoch in range(1, settings.epochs + 1):
            rm.train()
            for batch in torch.randperm(len(train), generator=generator).split(settings.batch_size):
                r_w, r_l = pair_rewards(rm, [train[i] for i in batch.tolist()])
                loss = bradley_terry_loss(r_w, r_l, margins[batch.to(rm.device)], settings.center)
                if not loss.isfinite():
                    raise NonFiniteError(f"reward model step {step + 1}: the loss is {loss.item()} (not finite); "
                                         f"nothing was written to {out}: try a lower lr (now {settings.lr})")
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(rm.parameters(), settings.max_grad_norm)
                optimizer.step()
                schedule.step()
                step += 1
                if step % settings.log_every == 0:
                    metrics.write({"step": step, "epoch": epoch, "loss": loss, "lr": schedule.get_last_lr()[0],
                                   "accuracy": pair_outcomes(r_w, r_l).mean(),
                                   "margin": (r_w - r_l).mean(), "reward_mean": (r_w + r_l).mean() / 2})
            if held:
                final = {f"eval/{k}": v for k, v in evaluate_pairs(rm, held, settings.eval_batch_size).items()}
                metrics.write({"step": step, "epoch": epoch, **final})
                log(f"epoch {epoch}/{settings.epochs} (step {step}): held-out pair accuracy "
                    f"{final['eval/accuracy']:.3f}, loss {final['eval/loss']:.4f}, margin {final['eval/margin']:.3f}")
        rm.save(tmp, {"settings": settings.model_dump(), "pairs": str(Path(pairs_path).resolve()),
                      "eval_pairs": str(Path(eval_path).resolve()) if eval_path else None,
                      "train_pairs": len(train), "held_out_pairs": len(held), "steps": step, "metrics": final})
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    install_dir(tmp, out)
    log(f"reward model: {out}")
    return {"steps": step, **final}
