import torch

import polo.core.shaping  # noqa: F401  (registers)
from polo.core.registry import SHAPING

from .helpers import build_batch, close


def lengths_batch(lengths, width):
    mask = (torch.arange(width)[None] < torch.tensor(lengths)[:, None]).long()
    return build_batch([0.0] * len(lengths), mask=mask)


def test_worked_example():
    shaping = SHAPING.build({"name": "overlong", "max_length": 20480, "buffer": 4096, "factor": 1.0})
    penalty = shaping(lengths_batch([10000, 17000, 20480, 15000], 20480), max_new_tokens=99999)
    close(penalty, [0.0, -0.1504, -1.0, 0.0])
    close(penalty + torch.tensor([1.0, 1.0, -1.0, -1.0], dtype=torch.float64), [1.0, 0.8496, -2.0, -1.0])


def test_defaults_follow_the_generation_limit():
    shaping = SHAPING.build("overlong")  # L_max = max_new_tokens = 10, L_buf = 2
    close(shaping(lengths_batch([7, 8, 9, 10, 0], 10), max_new_tokens=10), [0.0, 0.0, -0.5, -1.0, 0.0])
    assert shaping.needs() == set() and shaping.weight == 1.0
    close(SHAPING.build({"name": "overlong", "factor": 0.5})(lengths_batch([10], 10), 10), [-0.5])


# ---- mutation-testing kills (docs/mutation.md)
def test_default_buffer_is_a_fifth_rounded_down_and_at_least_one():
    shaping = SHAPING.build("overlong")
    # L_max = 12: L_buf = 12 // 5 = 2, penalty −(L − 10)/2 in the rewards' dtype
    penalty = shaping(lengths_batch([10, 11, 12], 12), max_new_tokens=12)
    close(penalty, [0.0, -0.5, -1.0])
    assert penalty.dtype == torch.float64
    # L_max = 4: 4 // 5 = 0, so L_buf = 1 and the penalty is −(L − 3)
    close(shaping(lengths_batch([3, 4], 4), max_new_tokens=4), [0.0, -1.0])


def test_every_row_is_present_as_a_bool_mask():
    present = SHAPING.build("overlong").present(lengths_batch([3, 10], 10))
    assert present.dtype == torch.bool and present.tolist() == [True, True]


def test_integer_rewards_measure_lengths_in_float32():
    batch = lengths_batch([200], 200)
    batch.rewards = torch.zeros(1, dtype=torch.int8)  # neither 200 nor 200 − 50 fits int8
    penalty = SHAPING.build({"name": "overlong", "max_length": 250, "buffer": 200})(batch, 250)
    assert penalty.dtype == torch.float32
    close(penalty, [-0.75])  # −(200 − (250 − 200))/200
