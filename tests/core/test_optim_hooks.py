import pytest
import torch

from polo.core.optim_hooks import SNRLearningRate, gradient_snr
from polo.core.registry import OPTIMIZER_HOOKS, ConfigError

CLEAN = torch.tensor([[1, 0, 2], [0.8, 0.2, 1.6], [1.2, -0.2, 2.2], [1, 0, 2.2]], dtype=torch.float64)
NOISY = torch.tensor([[1, 0], [-1, 0.2], [0.8, -0.2], [-0.6, 0]], dtype=torch.float64)


def test_snr_examples():
    signal, noise = gradient_snr(CLEAN)
    assert abs(noise - 0.1333 / 4) < 1e-4 and abs(signal - 4.9667) < 1e-4
    assert abs(1e-6 * SNRLearningRate().lr_factor(CLEAN) - 9.9333e-07) < 1e-10
    assert abs(1e-6 * SNRLearningRate().lr_factor(NOISY) - 1.0e-07) < 1e-12  # SNR 0 → floor f_min


def test_ema_smoothing_and_state_round_trip():
    hook = OPTIMIZER_HOOKS.build({"name": "snr_lr", "ema": 0.5})
    first = hook.lr_factor(CLEAN)
    second = hook.lr_factor(NOISY)
    assert abs(second - (0.5 * first + 0.5 * 0.1)) < 1e-12
    fresh = SNRLearningRate(ema=0.5)
    fresh.load_state_dict(hook.state_dict())
    assert fresh.lr_factor(CLEAN) == hook.lr_factor(CLEAN)
    assert hook.after_update(None, None)["snr_lr/factor"] == hook._factor


def test_degenerate_gradients():
    hook = SNRLearningRate()
    assert hook.lr_factor(CLEAN[:1]) == 1.0  # K = 1: no noise estimate, factor unchanged
    assert hook.lr_factor(torch.ones(3, 5)) == 1.0  # no noise at all: full step
    assert SNRLearningRate().lr_factor(torch.zeros(3, 5)) == 0.1  # no gradient: floor
    assert SNRLearningRate().state_dict() == {}


def test_config_validation():
    with pytest.raises(ConfigError, match="f_min"):
        OPTIMIZER_HOOKS.build({"name": "snr_lr", "f_min": 0})
