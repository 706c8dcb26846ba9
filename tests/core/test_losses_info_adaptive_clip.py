import pytest
import torch

from polo.core.losses.info_adaptive_clip import InfoAdaptiveClip

from .helpers import close
from .zoo_helpers import ratio_batch, token_mean_backward


def test_worked_example_bounds_and_losses():
    logp, batch = ratio_batch([1.8, 1.8, 0.4, 0.4], [1.0, 1.0, -1.0, -1.0], entropy_old=[0.1, 2.0, 0.5, 1.0])
    out = InfoAdaptiveClip()(logp, batch)
    close(out.token_loss[0].detach(), [-1.6931, -1.8000, 0.4439, 0.4000])  # tokens 1 and 3 clipped
    close(out.metrics["density_mean"], (0.05 + 1.0 + 0.25 + 0.5) / 4)
    (out.token_loss.sum()).backward()
    close(logp.grad[0], [0.0, -1.8, 0.0, 0.4])


@pytest.mark.parametrize("ratio, adv, expected", [(1.3, 1.0, -1.0), (0.7, -1.0, 1.0)])
def test_zero_entropy_pins_the_ratio(ratio, adv, expected):
    logp, batch = ratio_batch([ratio], [adv], entropy_old=[0.0])
    out = InfoAdaptiveClip()(logp, batch)
    close(out.token_loss[0].detach(), [expected])
    _, grad = token_mean_backward(out, logp, batch)
    close(grad[0], [0.0])


def test_max_entropy_ignores_padding():
    logp, batch = ratio_batch([1.8, 1.0], [1.0, 0.0], mask=[1, 0], entropy_old=[2.0, 50.0])
    close(InfoAdaptiveClip()(logp, batch).token_loss[0, :1].detach(), [-1.8])  # hi = 1 + ln 21 > 1.8


# ---- mutation-testing kills (docs/mutation.md)
def test_entropy_is_read_in_the_masks_dtype():
    logp, batch = ratio_batch([1.0, 1.0], [1.0, 1.0], entropy_old=[0.5, 1.0])  # entropy_old in float64
    batch.rewards = batch.rewards.float()  # so the mask is float32
    out = InfoAdaptiveClip()(logp, batch)
    close(out.metrics["density_mean"], 0.75)  # ρ = [0.5, 1]
    assert out.metrics["density_mean"].dtype == torch.float32
