import math
import os

import pytest
import torch

THREADS = int(os.environ.get("POLO_TEST_THREADS", "1"))
"""torch intra-op threads of every test; ``POLO_TEST_THREADS=2 pytest`` runs the suite threaded (float32
reductions then split differently, which the tolerances below must absorb)."""
torch.set_num_threads(THREADS)


def pytest_report_header(config):
    return f"torch threads: {THREADS} (POLO_TEST_THREADS)"


@pytest.fixture(autouse=True)
def torch_threads():
    """Re-apply ``THREADS`` before each test: training code run in a test sets its own (``train.threads``)."""
    torch.set_num_threads(THREADS)


# Overrides that shrink any recipe to a seconds-long run on the built-in model.
TINY = [
    "model.tiny.hidden_size=32", "model.tiny.num_layers=1", "model.tiny.num_heads=2",
    "model.tiny.intermediate_size=64",
    "warm_start.steps=40", "warm_start.examples=200",
    "rollout.prompts_per_step=4",
    "train.steps=3", "train.eval_size=16", "train.train_pool=200", "train.eval_every=3",
    "train.save_every=3", "train.threads=1",
]


@pytest.fixture(scope="session", autouse=True)
def polo_cache(tmp_path_factory):
    """Warm starts are cached once per test session, never in the user's cache."""
    path = os.environ.get("POLO_CACHE") or str(tmp_path_factory.mktemp("polo_cache"))
    os.environ["POLO_CACHE"] = path
    return path


@pytest.fixture
def tiny():
    return list(TINY)


class Float32:
    """Tolerances that float32 can promise, from the magnitudes involved.

    One rounding errs by at most half an ulp (``EPS`` = 2⁻²³ ≈ 1.2e-7 of the magnitude). Two kernel paths
    (a KV-cached decode step and a full forward, a shared prompt and a plain one, another thread split)
    sum each reduction of length K in another order; those rounding errors add up like a random walk, to a
    few ulps of the magnitude times √K.
    """

    EPS = torch.finfo(torch.float32).eps
    ULPS = 4  # "a few ulps"

    @classmethod
    def atol(cls, magnitude: float, reduction: int = 1) -> float:
        """A few ulps of ``magnitude`` times √``reduction``."""
        magnitude = magnitude.detach() if isinstance(magnitude, torch.Tensor) else magnitude
        return cls.ULPS * cls.EPS * float(magnitude) * math.sqrt(reduction)

    @classmethod
    def logp_atol(cls, policy, prompt_ids, prompt_mask, response_ids, response_mask, temperature=1.0) -> float:
        """Response log-probs of one float32 model computed by two kernel paths.

        Each ``z = logits / temperature`` errs by a few ulps of max|z| times √K, K the model's longest
        reduction (hidden size, MLP width, or the sequence for attention); ``logp = z_tok − logsumexp(z)``
        adds two such errors, and the rounding of the logsumexp itself (|logsumexp| ≤ max|z| + ln V).
        """
        from polo.policy.inputs import concat_inputs

        T = response_ids.shape[1]
        with torch.no_grad():
            logits = policy.model(**concat_inputs(prompt_ids, prompt_mask, response_ids), use_cache=False,
                                  logits_to_keep=T + 1).logits[:, :-1].float()
        z = float(logits.abs().amax(-1)[response_mask.bool()].max()) / temperature
        K = cls.reduction(policy, prompt_ids.shape[1] + T)
        return cls.atol(2 * z, K) + cls.atol(z + math.log(logits.shape[-1]))

    @staticmethod
    def reduction(policy, length: int) -> int:
        """The longest reduction of a forward over ``length`` tokens: hidden size, MLP width or ``length``."""
        config = policy.hf_model.config
        return max(config.hidden_size, config.intermediate_size, length)


@pytest.fixture(scope="session")
def f32():
    """``Float32``: tolerances grounded in float32 rounding (see its docstring)."""
    return Float32
