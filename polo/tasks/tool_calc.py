"""``tool_calc``: arithmetic stories answered through calculator calls, for tool-integrated reasoning (PRS).

The stories are ``word_problems``' (one person, one kind of item, ``ops`` computations, ``distractors``
irrelevant sentences); the completion works them with calls in the schema of ``polo.tasks.tool_calls``, each
followed by its result, and answers with the count and the item, the short-form reference::

    Ann has 7 pears. Ann gets 3 boxes of 4. How many pears does Ann have?
    <c>3*4</c>=12
    <c>7+12</c>=19
    <a>19 pears</a>

With ``execute_calls`` (the default, PRS's tool-integrated setting) the calculator runs during generation: when
the policy closes a call with ``</c>``, the calculator's reply ``=12`` (``=error`` for an argument it cannot
evaluate; ``tool_calls.call_result``) is fed to the model as tool tokens, which are context for the policy but
never its actions (``response_mask`` 0: out of the loss, no log-probs), and the policy goes on after it
(``polo.engines.tool_use``). With ``execute_calls: false`` the policy writes each result itself. Either way the
reward checks the calls afterwards (format) and the answer against the reference (quality). A completion is
*correct* when its format is complete (``f = 1``) and its tagged answer equals the reference (case and spacing
aside), i.e. exactly when its ``prs`` reward is 1. The demonstrations write after each call the calculator's
reply to it, so the warm start shows the text the executed calls produce.

Warm-start noise: a ``demo_noise`` share of the demonstrations (chosen by a hash of the prompt) has one
defect, drawn evenly: the first call left unclosed (``f = 1/ops``), the answer written as ``#### 19 pears``
without its tag (``f = 0``) or the number without the item (``<a>19</a>``, LA-BLEU ``e^{-1}``), so the
warm-started policy makes the mistakes PRS's stages grade and RL has them to remove.
"""
from __future__ import annotations

import random
import zlib

from pydantic import Field

from polo.tasks.base import Example, Task, Tool
from polo.tasks.prs import prs
from polo.tasks.registry import register_task
from polo.tasks.rewards import RewardSpec
from polo.tasks.tool_calls import CALL_CLOSE, calculator, call_result, format_score, tagged_answer
from polo.tasks.word_problems import FAMILIES, draw_story

DEFECTS = ("unclosed_call", "untagged_answer", "number_only")
LONGEST_ITEM = max(len(item) for family in FAMILIES for item in family.items)


def normalized(text: str) -> str:
    return " ".join(text.lower().split())


@register_task("tool_calc")
class ToolCalc(Task):
    """Word problems solved with calculator calls ``<c>expr</c>=value`` and answered ``<a>N items</a>``."""

    default_rewards = [RewardSpec(prs.registry_name, 1.0)]  # importing prs registers the PRS rewards

    ops: int = Field(2, ge=1, le=5)
    """Computations the story implies (calls of the demonstration)."""
    distractors: int = Field(0, ge=0, le=3)
    """Irrelevant sentences stating other quantities."""
    max_value: int = Field(10, ge=10, le=999)
    """Bound on every operand and result."""
    demo_noise: float = Field(0.2, ge=0.0, le=1.0)
    """Share of warm-start demonstrations with one format or answer defect."""
    execute_calls: bool = True
    """Run the calculator during generation, its replies appended as tool tokens (module docstring); False: the
    policy writes each result itself."""

    @property
    def max_completion_chars(self) -> int:
        # each call line: "<c>" a op b "</c>=" result "\n" (3 + 2d+1 + 5 + d + 1); then "<a>" d " " item "</a>"
        digits = len(str(self.max_value))
        return self.ops * (3 * digits + 10) + digits + LONGEST_ITEM + 8

    def sample(self, rng: random.Random) -> Example:
        story = draw_story(rng, self.ops, self.distractors, self.max_value)
        items = story.question.split()[2]
        calls = "\n".join(f"<c>{a}{op}{b}</c>{calculator(f'{a}{op}{b}')}" for a, op, b, _ in story.computations)
        return Example(story.prompt, f"{story.answer} {items}", {"calls": calls})

    def demonstration(self, example: Example) -> str:
        calls, answer = example.columns["calls"], example.answer
        rng = random.Random(zlib.crc32(example.prompt.encode()))
        defect = rng.choice(DEFECTS) if rng.random() < self.demo_noise else None
        if defect == "unclosed_call":
            calls = calls.replace("</c>", "", 1)
        if defect == "untagged_answer":
            return f"{calls}\n#### {answer}"
        if defect == "number_only":
            return f"{calls}\n<a>{answer.split()[0]}</a>"
        return f"{calls}\n<a>{answer}</a>"

    def tool(self) -> Tool | None:
        return Tool(CALL_CLOSE, call_result) if self.execute_calls else None

    def is_correct(self, completion: str, example: Example) -> bool:
        answer = tagged_answer(completion)
        return (answer is not None and normalized(answer) == normalized(example.answer)
                and format_score(completion) == 1.0)
