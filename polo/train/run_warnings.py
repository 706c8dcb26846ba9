"""One-line warnings for what would otherwise surprise silently: a task smaller than the problems drawn from
it, characters the built-in tokenizer cannot read, a warm start stopped below its target, a chat template
that is not there, and completions cut at ``rollout.max_new_tokens`` (once per run)."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from polo.policy.tokenizer import unknown_characters
from polo.tasks.base import Example
from polo.train.callbacks import Callback

DISTINCT_FLOOR = 1 - 1 / math.e
"""``n`` uniform draws from ``N`` problems leave about ``N·(1 − e^(−n/N))`` distinct ones, ``(1 − 1/e)·n`` when
``N = n``: fewer distinct prompts than that means the task has fewer problems than were drawn."""


def too_few_problems(prompts: Sequence[str]) -> bool:
    return len(set(prompts)) < DISTINCT_FLOOR * len(prompts)


def prompt_key(example: Example) -> str:
    return example.prompt


def data_warnings(pool: Sequence[Example], evaluation: Sequence[Example], builtin_tokenizer: bool,
                  key: Callable[[Example], str] = prompt_key) -> list[str]:
    """Warnings about a run's training pool and, for the built-in tokenizer, its texts; ``key`` is a problem's
    identity (``Task.problem_key``: the prompt, or e.g. the picture of an image task)."""
    prompts = [key(e) for e in pool]
    found = []
    if too_few_problems(prompts):
        found.append(f"warning: train.train_pool={len(prompts)} drew only {len(set(prompts))} distinct problems: the "
                     f"task has fewer training problems than the pool, so training repeats them; lower "
                     f"train.train_pool or use a larger task")
    if builtin_tokenizer:
        unknown = unknown_characters(t for e in [*pool, *evaluation] for t in (e.prompt, e.answer))
        if unknown:
            shown = ", ".join(repr(c) for c, _ in unknown.most_common(5))
            found.append(f"warning: the built-in character tokenizer reads {len(unknown)} characters of the task's "
                         f"prompts and answers ({sum(unknown.values())} occurrences: {shown}) as <unk>, so the model "
                         f"can neither read nor write them; use printable ASCII text or a model.path checkpoint "
                         f"whose tokenizer covers them")
    return found


def held_out_overlap_warning(examples: Sequence[Example], held_out: Sequence[Example],
                             key: Callable[[Example], str] = prompt_key) -> str | None:
    """The warm start's held-out checks that are also its demonstrations, when the task is that small (problems
    compared by ``key``, as in ``data_warnings``)."""
    seen = {key(e) for e in examples}
    overlap = sum(key(e) in seen for e in held_out)
    if not overlap or not too_few_problems([key(e) for e in [*examples, *held_out]]):
        return None
    return (f"warning: {overlap} of {len(held_out)} held-out warm-start checks are also training demonstrations (the "
            f"task has fewer distinct problems than warm_start.examples + warm_start.check_size = "
            f"{len(examples) + len(held_out)}), so the warm-start accuracy overstates what the model learned; lower "
            f"warm_start.examples or use a larger task")


def warm_start_cap_warning(steps: int, target: float, accuracy: float | None, setting: str = "warm_start") -> str:
    """``setting``: where the warm start's settings live (``warm_start``, or a role's ``roles.teacher.warm_start``)."""
    reached = "never checked" if accuracy is None else f"{accuracy:.3f}"
    return (f"warning: the warm start stopped at its step cap {setting}.steps={steps} with held-out greedy accuracy "
            f"{reached}, below {setting}.target_accuracy={target}; raise {setting}.steps or lower the target")


def chat_template_warning(path: object) -> str:
    return (f"warning: model.chat_template=true, but the tokenizer of {path} has no chat template: prompts are fed "
            f"as plain text; set model.chat_template=false or use a checkpoint with a chat template")


class TruncationWarning(Callback):
    """Logs once per run when more than half of a step's completions hit ``max_new_tokens`` without EOS."""

    def __init__(self):
        self.warned = False

    def on_step_end(self, trainer, row, rollouts) -> None:
        fraction = row["response/truncated_frac"]
        if self.warned or fraction <= 0.5:
            return
        self.warned = True
        derived = trainer.recipe.rollout.max_new_tokens is None
        advice = (" (unset, so the task's longest answer + 1): a reward expecting longer text (e.g. a \\boxed{} "
                  "format reward) needs rollout.max_new_tokens set" if derived else
                  ": raise it if correct completions are longer")
        trainer.log(f"warning: {fraction:.0%} of step {row['step']}'s completions hit rollout.max_new_tokens="
                    f"{trainer.max_new_tokens} without EOS{advice} (said once per run)")
