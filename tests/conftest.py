import os

import pytest
import torch

torch.set_num_threads(1)

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
