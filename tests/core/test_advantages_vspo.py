"""VSPO's value-smoothing clipped advantage: the spec's worked example and the edge cases."""
import pytest
import torch
from pydantic import ValidationError

from polo.core.advantages import GRPO
from polo.methods.vspo.advantage import VSPO, smoothed_group_std

from .helpers import build_batch, close, seq_adv

REWARDS = [1, 0, 0, 0, 1, 1, 1, 0, 0.9, 0.1, 0.5, 0.5]
GROUP = [0] * 4 + [1] * 4 + [2] * 4


def test_worked_example():
    r, g = torch.tensor(REWARDS, dtype=torch.float64), torch.tensor(GROUP)
    _, smooth, _ = smoothed_group_std(r, g, 0.5)
    close(smooth[::4], [0.4711, 0.4711, 0.3844])
    close(seq_adv(VSPO(), REWARDS, GROUP), [1.5920, -0.5307, -0.5307, -0.5307, 0.5307, 0.5307, 0.5307, -1.5920,
                                            1.0406, -1.0406, 0, 0])


def test_eta_one_without_clip_is_grpo_and_the_clip_bounds():
    close(seq_adv(VSPO(eta=1.0, clip=1e9), REWARDS, GROUP), seq_adv(GRPO(), REWARDS, GROUP))
    adv = seq_adv(VSPO(clip=1.0), REWARDS, GROUP)
    assert adv.abs().max() == 1.0 and adv[0] == 1.0 and adv[7] == -1.0


def test_all_equal_group_singleton_and_order_of_group_ids():
    # group 5 all equal (0), group 2 a singleton (0); sigma_bar over the groups of >= 2 samples only
    adv = seq_adv(VSPO(), [1.0, 1.0, 0.7, 1.0, 0.0], [5, 5, 2, 9, 9])
    close(adv, [0, 0, 0, 0.5 / (0.5 * 0.7071 + 0.5 * 0.3536), -0.5 / (0.5 * 0.7071 + 0.5 * 0.3536)])  # ±0.9428
    assert seq_adv(VSPO(), [0.3], [0]).tolist() == [0.0]


def test_masked_tokens_get_zero_and_the_clip_fraction_is_reported():
    batch = build_batch(REWARDS, GROUP, mask=[[1, 1, 0]] * 12)
    result = VSPO(clip=1.0)(batch)
    assert (result.advantages[:, 2] == 0).all() and torch.equal(result.advantages[:, 0], result.advantages[:, 1])
    assert result.diagnostics["vspo/clip_frac"] == pytest.approx(4 / 12)  # |A| 1.5920 twice, 1.0406 twice


def test_nan_reward_and_bad_settings_are_refused():
    with pytest.raises(ValueError, match="rewards must be finite"):
        seq_adv(VSPO(), [1.0, float("nan")], [0, 0])
    for bad in ({"eta": 1.5}, {"clip": 0.0}, {"eps": -1.0}):
        with pytest.raises(ValidationError, match=next(iter(bad))):
            VSPO(**bad)
