"""polo: policy optimization for language models, built from small registered parts.

The public Python API (docs/python_api.md)::

    import polo

    recipe = polo.load_recipe("grpo", ["train.steps=50"])
    trainer = polo.Trainer(recipe, rewards=["correct", (my_reward_fn, 0.2)], callbacks=[MyCallback()])
    rows = trainer.run()                       # the metrics rows, as in metrics.jsonl

Names are imported on first use, so ``import polo`` stays light.
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "Trainer": "polo.train.trainer",
    "resume": "polo.train.trainer",
    "Recipe": "polo.train.config",
    "load_recipe": "polo.train.config",
    "Callback": "polo.train.callbacks",
    "Task": "polo.tasks",
    "Example": "polo.tasks",
    "RewardSpec": "polo.tasks",
    "register_reward": "polo.tasks",
    "register_task": "polo.tasks",
    "load_plugin": "polo.tasks",
    "build_task": "polo.tasks",
    "Policy": "polo.policy.policy",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'polo' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
