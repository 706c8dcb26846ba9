"""Supervised warm start of the built-in model on the task's demonstrations, cached on disk.

RL needs a policy that is right sometimes: the built-in model is trained for a short supervised phase
(cross-entropy on the demonstration tokens only) on a limited set of training problems, which leaves it
with non-trivial but imperfect held-out accuracy. The result is cached under ``$POLO_CACHE`` (default
``~/.cache/polo``), keyed by everything that determines it, including the contents of the task's files.

A cache entry is a ``save_pretrained`` folder with ``manifest.json`` (each file's size and sha256), written
last; an entry is used only if every listed file matches, otherwise (missing manifest, as in entries of
older polo, a truncated or edited file, a missing file) it is rebuilt with a log line saying why. Building
happens under a blocking ``RunLock`` per entry, so concurrent processes build it once: the others wait,
then find it cached. The finished folder is moved into place with an atomic rename.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from contextlib import nullcontext
from pathlib import Path

import torch
from rich.console import Console

from polo.envs.entry_points import entry_point_file
from polo.policy.kinds import policy_class
from polo.policy.policy import Policy
from polo.tasks.base import Task
from polo.train.config import Recipe
from polo.train.lock import RunLock
from polo.train.manifest import file_sha256, verify_manifest, write_manifest
from polo.train.progress import progress_bar
from polo.train.run_warnings import held_out_overlap_warning, warm_start_cap_warning


def cache_root() -> Path:
    return Path(os.environ.get("POLO_CACHE", Path.home() / ".cache" / "polo"))


def task_files(config: object) -> dict[str, str]:
    """``{value: sha256}`` for every string in the task config (at any depth of dicts and lists) that
    names an existing file, relative paths from the working directory as tasks read them, or an entry point
    ``"module:attr"`` (a user's environment class) whose module is a file (that file's)."""
    found: dict[str, str] = {}

    def walk(value: object) -> None:
        if isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v)
        elif isinstance(value, str) and value and value not in found:
            try:
                path = Path(value).expanduser()
                path = path if path.is_file() else entry_point_file(value)
                if path is not None:
                    found[value] = file_sha256(path)
            except (OSError, ValueError):  # not a usable path (too long, NUL byte, unreadable)
                pass

    walk(config)
    return found


def task_knobs(config: dict, task: Task | None = None) -> dict:
    """The task config with every knob filled in, defaults included (a task whose default changes gets a new key),
    read from ``task`` when the caller has built it from ``config`` already (a data task reads its file when built);
    a knob the task added later is left out while at its ``key_defaults`` value."""
    from polo.tasks import build_task

    task = build_task(config) if task is None else task
    knobs = task.model_dump(mode="json")
    return {"name": config["name"], **{k: v for k, v in knobs.items() if task.key_defaults.get(k, object()) != v}}


def warm_start_key(recipe: Recipe, task: Task | None = None) -> str:
    """Hash of everything that determines the warm start: the task config with its defaults filled in (from
    ``task``, the recipe's task already built, when given), the contents (sha256) of every file it names (the
    rule: any string value of ``recipe.task``, at any depth, that is a path to an existing file, e.g. the
    ``jsonl`` task's ``path``, or an entry point into a file, e.g. a user's environment class), the built-in model's
    shape, the warm-start settings (with ``hinted``, the guided engine's hinted prompt too) and the seed. Editing a
    task's data file or a user's environment therefore gives a new key, and a new warm start."""
    warm = recipe.warm_start.model_dump()
    tree = {"task": task_knobs(recipe.task, task), "tiny": recipe.model.tiny.model_dump(), "warm": warm,
            "seed": recipe.seed, "version": 3}
    if warm.pop("hinted"):  # only then, with the hinted prompt's settings: warm starts without hints keep their keys
        engine = recipe.built().engine
        tree["hints"] = {"share": recipe.warm_start.hinted, "template": engine.template, "source": engine.source,
                         "level": max(engine.levels)}
    if recipe.model.kind != "causal":  # only then: causal runs keep their keys
        tree.update(kind=recipe.model.kind, vision=recipe.model.vision.model_dump())
    files = task_files(recipe.task)
    if files:  # only then: tasks without files keep their keys (old entries are verified, then rebuilt)
        tree["files"] = files
    blob = json.dumps(tree, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def verify_entry(folder: Path) -> str | None:
    """None if the cache entry is complete and intact (its manifest verifies and lists config.json), else why
    not (for a log line)."""
    return verify_manifest(folder, required=("config.json",))


def supervised_finetune(policy: Policy, task: Task, recipe: Recipe, log=print, label: str = "warm start",
                        setting: str = "warm_start") -> float | None:
    """Supervised training on demonstrations (the policy kind's ``demonstration_loss``: for a causal LM the
    cross-entropy ``L = −mean_{completion tokens} log π(y_t | x, y_<t)``), until the greedy accuracy on held-out
    training-split problems reaches ``target_accuracy`` (returned) when the task's demonstrations follow one
    demonstrator (``Task.consistent_demonstrator``; otherwise all ``steps`` run); with ``steps`` 0 nothing at all (no
    demonstration is built). With ``hinted``, that share of each step's rows is shown under the guided engine's
    hinted prompt (``Guided.hinted_demonstrations``), so every problem is seen plain and hinted over the run.
    Progress, named ``label``: a rich progress bar (step, loss, accuracy) on a terminal, else a log line every 100
    steps; a warning naming ``setting`` (where these settings live) when the step cap ends it below the target."""
    from polo.engines.accuracy import accuracy

    warm = recipe.warm_start
    if not warm.steps:  # the policy as it is: no demonstration is built (an environment may have no expert)
        policy.eval()
        return None
    examples = task.warm_start_examples(warm.examples + warm.check_size, seed=recipe.seed)
    examples, held_out = examples[: warm.examples], examples[warm.examples :]
    overlap = held_out_overlap_warning(examples, held_out, task.problem_key)
    if overlap:
        log(overlap)
    completions = [task.demonstration(e) for e in examples]
    target = warm.target_accuracy if task.consistent_demonstrator() else None
    if target is None and warm.target_accuracy is not None:
        log(f"warm start: the demonstrations follow no one demonstrator (an environment's own successes), so held-out "
            f"accuracy cannot end the warm start (warm_start.target_accuracy={warm.target_accuracy}): all "
            f"{warm.steps} steps run")
    hint_engine = recipe.built().engine if warm.hinted else None
    hints = random.Random(recipe.seed)  # which rows are hinted, and at which level: apart from the batches' draws
    max_new = task.max_completion_chars + 1
    generator = torch.Generator().manual_seed(recipe.seed)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=warm.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 20))
    acc = None
    console = Console(stderr=True)
    bar, advance = progress_bar(label, warm.steps, console=console) if console.is_terminal else (nullcontext(), None)
    with bar:
        for step in range(warm.steps):
            policy.train()
            idx = torch.randint(len(examples), (warm.batch_size,), generator=generator).tolist()
            shown = [examples[i] for i in idx]
            if warm.hinted:  # the prompts only: a hinted demonstration's target is its plain one
                shown = hint_engine.hinted_demonstrations(task, shown, warm.hinted, hints)
            prompt_ids, prompt_mask = policy.encode_prompts(shown)
            ids, mask = policy.encode_completions([completions[i] for i in idx])
            loss = policy.demonstration_loss(prompt_ids, prompt_mask, ids, mask, policy.prompt_inputs(shown))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            if target is not None and (step + 1) % warm.check_every == 0:
                acc = accuracy(policy, task, held_out, max_new)
                if acc >= target:
                    log(f"{label} step {step + 1}: loss {loss.item():.4f}, held-out greedy accuracy {acc:.3f}: done")
                    break
            if advance is not None or (step + 1) % 100 == 0:
                status = f"loss {loss.item():.4f}" + (f", held-out greedy accuracy {acc:.3f}" if acc is not None else "")
                if advance is not None:
                    advance(step + 1, status)
                else:
                    log(f"{label} step {step + 1}/{warm.steps}: {status}")
        else:  # the step cap, not the target, ended it
            if target is not None:
                log(warm_start_cap_warning(warm.steps, target, acc, setting))
    policy.eval()
    return acc


def ensure_warm_start(recipe: Recipe, task: Task, log=print, label: str = "warm start",
                      setting: str = "warm_start") -> Path:
    """Path of the warm-started built-in model for this recipe, training it first if it is not cached or
    its cache entry fails verification (then it is rebuilt, with a log line saying why); ``label`` names it in the
    log and the progress (``teacher warm start``: a teacher's), ``setting`` where its settings live
    (``roles.teacher.warm_start``: a teacher's)."""
    key = warm_start_key(recipe, task)
    target = cache_root() / "warm_start" / key
    if verify_entry(target) is None:
        return target
    with RunLock(target, wait=True, lock_path=target.parent / f"{key}.lock", log=log):
        problem = verify_entry(target)  # again: whoever held the lock may have just built it
        if problem is None:
            return target
        if problem != "missing":
            log(f"{label}: cache entry {target} is {problem}; rebuilding it")
        with torch.random.fork_rng(devices=[]):  # a run draws the same numbers whether its warm start was cached
            torch.manual_seed(recipe.seed)
            policy = policy_class(recipe.model.kind).build_tiny(recipe.model)
            warm = recipe.warm_start  # a role's longer warm start (a teacher's) says so by its budget and target
            size = f"the built-in model ({sum(p.numel() for p in policy.parameters()):,} parameters)"
            log(f"{label}: warm_start.steps=0: {size} starts as initialised, on no demonstrations; cached in "
                f"{target}" if not warm.steps else
                f"{label}: training {size} for up to {warm.steps} steps" + (f", until held-out greedy accuracy "
                f"{warm.target_accuracy}" if warm.target_accuracy is not None else "") +
                (f", {warm.hinted:.0%} of its rows hinted" if warm.hinted else "") + f"; cached in {target}")
            supervised_finetune(policy, task, recipe, log, label, setting)
        tmp = target.with_name(target.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        policy.save(tmp)
        write_manifest(tmp)  # last: an entry without one is incomplete
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():  # the bad entry: moved aside first, a rename cannot replace a non-empty folder
            bad = target.with_name(target.name + f".bad{os.getpid()}")
            shutil.rmtree(bad, ignore_errors=True)
            os.replace(target, bad)
            shutil.rmtree(bad, ignore_errors=True)
        try:
            os.replace(tmp, target)
        except OSError:  # another process (an older polo, without the lock) cached it first
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def warm_start_with(recipe: Recipe, task: Task, log, overrides: dict, seed: int | None = None,
                    label: str = "warm start", setting: str = "warm_start") -> Path:
    """The built-in model warm-started with ``recipe.warm_start`` changed by ``overrides`` (e.g. a teacher: the
    same model trained longer, ``{"target_accuracy": 0.9, "steps": 4000}``) and with ``seed`` (None: the
    recipe's), cached like every warm start; ``label`` names it in the log and the progress, ``setting`` in a
    warning."""
    settings = type(recipe.warm_start).model_validate({**recipe.warm_start.model_dump(), **overrides})
    update = {"warm_start": settings} if seed is None else {"warm_start": settings, "seed": seed}
    return ensure_warm_start(recipe.model_copy(update=update), task, log, label, setting)
