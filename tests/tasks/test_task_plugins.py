"""User code: a plugin file registering a custom task and a TRL-style reward, used through the API."""
import textwrap

import pytest

from polo.tasks import build_task, load_plugin, score

PLUGIN = '''
import random
from polo.tasks import Example, Task, register_reward, register_task

@register_task("test_plugin_double")
class Double(Task):
    digits: int = 2

    @property
    def max_completion_chars(self) -> int:
        return self.digits + 1

    def sample(self, rng: random.Random) -> Example:
        x = rng.randrange(10**self.digits)
        return Example(f"2*{x}=", str(2 * x))

@register_reward("test_plugin_short")
def short_answer(prompts, completions, answer, **kwargs):
    return [1.0 if len(c) <= len(a) + 2 else 0.0 for c, a in zip(completions, answer)]
'''


def test_load_plugin_registers_task_and_reward_once(tmp_path):
    path = tmp_path / "my-plugin.py"
    path.write_text(textwrap.dedent(PLUGIN))
    module = load_plugin(str(path))
    assert load_plugin(path) is module  # a second load does not re-register
    task = build_task({"name": "test_plugin_double", "digits": 3})
    examples = task.examples("train", 4, seed=0)
    rewards, names, weights = score(
        task, [{"name": "correct", "weight": 1.0}, {"name": "test_plugin_short", "weight": 0.5}],
        examples, [task.demonstration(ex) for ex in examples],
    )
    assert names == ("correct", "test_plugin_short") and weights.tolist() == [1.0, 0.5]
    assert bool((rewards == 1.0).all()) and task.max_completion_chars == 4


def test_load_plugin_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.py"):
        load_plugin(tmp_path / "nope.py")
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(RuntimeError, match="boom"):
        load_plugin(broken)
    broken.write_text("X = 1\n")
    assert load_plugin(broken).X == 1  # a failed import is not cached
