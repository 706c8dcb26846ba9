"""Supervised warm start of the built-in model on the task's demonstrations, cached on disk.

RL needs a policy that is right sometimes: the built-in model is trained for a short supervised phase
(cross-entropy on the demonstration tokens only) on a limited set of training problems, which leaves it
with non-trivial but imperfect held-out accuracy. The result is cached under ``$POLO_CACHE`` (default
``~/.cache/polo``), keyed by everything that determines it.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import torch

from polo.policy.policy import Policy
from polo.policy.tiny import build_tiny_model
from polo.policy.tokenizer import build_char_tokenizer
from polo.tasks.base import Task
from polo.train.config import Recipe


def cache_root() -> Path:
    return Path(os.environ.get("POLO_CACHE", Path.home() / ".cache" / "polo"))


def warm_start_key(recipe: Recipe) -> str:
    blob = json.dumps(
        {"task": recipe.task, "tiny": recipe.model.tiny.model_dump(), "warm": recipe.warm_start.model_dump(),
         "seed": recipe.seed, "version": 2},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def supervised_finetune(policy: Policy, task: Task, recipe: Recipe, log=print) -> float | None:
    """Cross-entropy on demonstrations, ``L = −mean_{completion tokens} log π(y_t | x, y_<t)``, until the
    greedy accuracy on held-out training-split problems reaches ``target_accuracy`` (returned)."""
    from polo.train.evaluate import accuracy

    warm = recipe.warm_start
    examples = task.examples("train", warm.examples + warm.check_size, seed=recipe.seed)
    examples, held_out = examples[: warm.examples], examples[warm.examples :]
    completions = [task.demonstration(e) for e in examples]
    max_new = task.max_completion_chars + 1
    generator = torch.Generator().manual_seed(recipe.seed)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=warm.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 20))
    acc = None
    for step in range(warm.steps):
        policy.train()
        idx = torch.randint(len(examples), (warm.batch_size,), generator=generator).tolist()
        prompt_ids, prompt_mask = policy.encode_prompts([examples[i].prompt for i in idx])
        ids, mask = policy.encode_completions([completions[i] for i in idx])
        logp = policy.forward_logp(prompt_ids, prompt_mask, ids, mask)["logp"]
        loss = -(logp * mask).sum() / mask.sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if warm.target_accuracy is not None and (step + 1) % warm.check_every == 0:
            acc = accuracy(policy, task, held_out, max_new)
            if acc >= warm.target_accuracy:
                log(f"warm start step {step + 1}: loss {loss.item():.4f}, held-out greedy accuracy {acc:.3f}: done")
                break
        if (step + 1) % 100 == 0:
            log(f"warm start step {step + 1}/{warm.steps}: loss {loss.item():.4f}" +
                (f", held-out greedy accuracy {acc:.3f}" if acc is not None else ""))
    policy.eval()
    return acc


def ensure_warm_start(recipe: Recipe, task: Task, log=print) -> Path:
    """Path of the warm-started built-in model for this recipe, training it first if not cached."""
    target = cache_root() / "warm_start" / warm_start_key(recipe)
    if (target / "config.json").exists():
        return target
    torch.manual_seed(recipe.seed)
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(recipe.model.tiny, tokenizer)
    policy = Policy(model, tokenizer)
    log(f"warm start: training the built-in model ({sum(p.numel() for p in model.parameters()):,} parameters)")
    supervised_finetune(policy, task, recipe, log)
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    policy.save(tmp)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(tmp, target)
    except OSError:  # another process cached it first
        shutil.rmtree(tmp, ignore_errors=True)
    return target
