"""Con-GRPO (MedAD-R1, arXiv:2602.01081): r = r_acc + r_fmt + λ_con·r_con·r_fmt with the rule judge (the reward
``think_consistency``) or a model judge (the shaping term ``consistency_judge``, tested in
tests/core/test_shaping_consistency.py), and GRPO's advantage."""
import torch

from polo.core.advantages.group import GRPO
from polo.tasks import get_reward

from tests.core.helpers import close


def test_worked_example():
    r_acc, r_fmt, r_con = torch.tensor([1.0, 1, 0, 0]), torch.tensor([1.0, 1, 1, 0]), torch.tensor([1.0, 0, 0, 0])
    r = r_acc + r_fmt + 1.0 * r_con * r_fmt
    close(r, [3.0, 2.0, 1.0, 0.0])
    close(GRPO().sequence_advantage(r, torch.zeros(4, dtype=torch.long)), [1.1619, 0.3873, -0.3873, -1.1619])


def test_rule_judge_reads_the_reasonings_last_number():
    texts = ["<think>2 red and 1 red: 3</think><answer>3</answer>",   # consistent
             "<think>I count 4</think><answer>3</answer>",             # reasoning says 4, answer 3
             "<think>3</think><answer>3</answer> trailing",             # malformed: r_fmt = 0
             "<think>no number</think><answer>3</answer>",
             "<think>3.0</think><answer> 3 </answer>",
             "<think>3</think><answer>three</answer>"]
    got = get_reward("think_consistency")(prompts=[""] * 6, completions=texts)
    assert got == [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    fmt = get_reward("think_answer_format")(prompts=[""] * 6, completions=texts)
    assert all(c <= f for c, f in zip(got, fmt))  # r_con·r_fmt never exceeds r_fmt


def test_rule_judge_on_conversational_completions():
    got = get_reward("think_consistency")(prompts=[[]], completions=[[{"role": "assistant",
                                                                          "content": "<think>5</think><answer>5</answer>"}]])
    assert got == [1.0]

