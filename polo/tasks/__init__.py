"""Verifiable tasks and reward functions.

Built-in tasks: ``addition`` (knob ``digits``; ``labelled_addition`` adds a ``label`` column), ``countdown``
(``count``, ``max_value``), ``reverse`` and
``sort`` (``length``), ``word_problems`` (traced arithmetic stories: ``ops``, ``distractors``,
``max_value``), ``addition_trace`` (``digits``) and ``multiplication_trace`` (``digits_a``, ``digits_b``):
the carries written out column by column, ``countdown_trace`` (``count``, ``max_value``, ``dead_ends``: countdown
with its depth-first search written out), ``sort_trace`` (``length``: selection sort written out),
``jsonl`` (a user file: ``path``, ``verifier``), ``dataset`` (local data read
with the optional ``datasets`` library: ``path``, ``prompt_column``, ``answer_column``, ...). Built-in generic rewards:
``exact_match``, ``numeric_match``, ``contains_answer``, ``digit_match``, ``char_match``; every task also
has ``correct`` (its verifier), and ``countdown`` has ``format`` and ``closeness``.

A custom reward has the TRL signature, so a function written for TRL's ``GRPOTrainer`` runs unchanged::

    from polo.tasks import register_reward

    @register_reward("short_answer")
    def short_answer(prompts, completions, answer, **kwargs):
        return [1.0 if len(c) <= len(a) + 2 else 0.0 for c, a in zip(completions, answer)]

A custom task subclasses ``Task``; its pydantic fields are its knobs::

    import random
    from polo.tasks import Example, Task, register_task

    @register_task("double")
    class Double(Task):
        digits: int = 2
        max_completion_chars: int = 4          # or a property computed from the knobs

        def sample(self, rng: random.Random) -> Example:   # or override examples(split, n, seed)
            x = rng.randrange(10**self.digits)
            return Example(f"2*{x}=", str(2 * x))

Put both in ``my_plugin.py``, load it with ``load_plugin("my_plugin.py")`` (CLI: ``--plugin my_plugin.py``)
and reference them from a recipe::

    task: {name: double, digits: 3}
    rewards: [{name: correct, weight: 1.0}, {name: short_answer, weight: 0.2}]

``score(task, rewards, examples, completions)`` turns completions into the ``[B, K]`` reward tensor.
See docs/tasks.md for the reward definitions.

Imports inside the middle layer (tests/test_layers.py, ``SIDEWAYS``): polo.tasks imports polo.envs and no other
package of it (the environment tasks wrap environments and build the ones that run programs with the code
sandbox, polo.tasks.sandbox); polo.envs imports nothing from polo.tasks. An Example's picture follows
polo.tasks.images, which the vision policy reads.
"""
from polo.tasks.base import Example, Task, split_of
from polo.tasks.plugins import load_plugin
from polo.tasks.registry import TASKS, build_task, register_task, task_names
from polo.tasks.rewards import (
    REWARDS,
    RewardFn,
    RewardSpec,
    get_reward,
    register_reward,
    resolve_reward,
    reward_names,
    score,
)

__all__ = [
    "REWARDS",
    "TASKS",
    "Example",
    "RewardFn",
    "RewardSpec",
    "Task",
    "build_task",
    "get_reward",
    "load_plugin",
    "register_reward",
    "register_task",
    "resolve_reward",
    "reward_names",
    "score",
    "split_of",
    "task_names",
]
