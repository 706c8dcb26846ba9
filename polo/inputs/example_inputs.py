"""Input providers read from the rollouts' texts and examples, no model involved.

* ``tag_used`` ``[B]``: 1.0 where the completion contains the components' ``tag_pattern`` (a regular
  expression, searched anywhere with ``.`` matching newlines; default GCPO's ``<auxiliary>.*?</auxiliary>``),
  else 0.0: the optional behaviour whose bonus GCPO decides per group (an aux block, a tool call, ...).
* ``prompt_label`` ``[B]``: the prompt's binary label from its example column ``label``: 1.0 for ``"vul"``,
  0.0 for ``"safe"`` (VULPO's vulnerable / patched code); any other value is an error naming it, and a task whose
  first training examples carry none is refused before any work (``label_missing``).
"""
from __future__ import annotations

import re

import torch
from torch import Tensor

from polo.core.advantages.gcpo import TAG_PATTERN
from polo.engines.base import Rollouts
from polo.inputs.base import ProviderContext, component_setting, register_provider

LABELS = {"vul": 1.0, "safe": 0.0}
"""``prompt_label``'s values of the example column ``label``."""


@register_provider("tag_used")
def tag_used(ctx: ProviderContext, rollouts: Rollouts) -> dict[str, Tensor]:
    """``tag_used`` ``[B]``: 1.0 where the completion matches ``tag_pattern``."""
    pattern = re.compile(component_setting(ctx.components.values(), "tag_pattern", TAG_PATTERN), re.DOTALL)
    found = [float(pattern.search(text) is not None) for text in rollouts.completions]
    return {"tag_used": torch.tensor(found, dtype=rollouts.batch.mask.dtype)}


def label_missing(task) -> str | None:
    """What the task lacks for ``prompt_label``, read off its first 8 training examples (seed 0); None: each has a
    ``label`` of ``vul`` or ``safe``."""
    for example in task.examples("train", 8, seed=0):
        value = example.columns.get("label")
        if not isinstance(value, str) or value not in LABELS:
            return (f"the task's examples need a column 'label' of {' or '.join(map(repr, LABELS))}, and the one with "
                    f"prompt {example.prompt!r:.60} has label {value!r}: use a labelled task, e.g. the built-in "
                    f"task={{name: labelled_addition}}, or task={{name: jsonl, path: FILE}} with rows "
                    f'{{"prompt", "answer", "label"}}')
    return None


@register_provider("prompt_label", check=label_missing)
def prompt_label(ctx: ProviderContext, rollouts: Rollouts) -> dict[str, Tensor]:
    """``prompt_label`` ``[B]``: 1.0 where the example's ``label`` is ``"vul"``, 0.0 where ``"safe"``."""
    labels = []
    for example in rollouts.examples:
        value = example.columns.get("label")
        if not isinstance(value, str) or value not in LABELS:
            raise ValueError(f"input 'prompt_label' reads the example column 'label' as one of {sorted(LABELS)}; "
                             f"the example with prompt {example.prompt!r:.80} has label {value!r}")
        labels.append(LABELS[value])
    return {"prompt_label": torch.tensor(labels, dtype=rollouts.batch.mask.dtype)}
