"""The providers read from completions and example columns: ``tag_used`` and ``prompt_label``."""
import pytest
import torch

from polo.core.advantages.gcpo import GCPO
from polo.engines.base import Rollouts
from polo.inputs.base import PROVIDERS, ProviderContext
from polo.tasks.base import Example

from tests.core.helpers import build_batch


def rollouts(completions, labels=None):
    examples = [Example("p", "a", {} if labels is None else {"label": label}) for label in labels or completions]
    return Rollouts(build_batch([0.0] * len(completions)), list(completions), examples)


def context(*components, needs=()):
    return ProviderContext(None, {}, None, None, {f"c{i}": c for i, c in enumerate(components)}, set(needs))


def test_tag_used_searches_the_components_pattern():
    texts = ["no tag", "x <auxiliary>line\nAB</auxiliary> y", "<auxiliary> open only", "<AUX>"]
    provide = PROVIDERS.get("tag_used")
    got = provide(context(GCPO()), rollouts(texts))["tag_used"]
    assert got.tolist() == [0.0, 1.0, 0.0, 0.0]  # the spec's default tag, across newlines
    got = provide(context(GCPO(tag_pattern=r"\(|<AUX>")), rollouts(["(3+5)*7", "3+5", "<AUX>"]))["tag_used"]
    assert got.tolist() == [1.0, 0.0, 1.0] and got.dtype == torch.float64
    with pytest.raises(ValueError, match="different tag_pattern"):
        provide(context(GCPO(tag_pattern="a"), GCPO(tag_pattern="b")), rollouts(["a"]))


def test_prompt_label_reads_the_label_column():
    provide = PROVIDERS.get("prompt_label")
    got = provide(context(), rollouts(["x", "y", "z"], labels=["vul", "safe", "vul"]))["prompt_label"]
    assert got.tolist() == [1.0, 0.0, 1.0]
    with pytest.raises(ValueError, match=r"column 'label' as one of \['safe', 'vul'\].*has label 'VUL'"):
        provide(context(), rollouts(["x"], labels=["VUL"]))
    with pytest.raises(ValueError, match="has label None"):
        provide(context(), rollouts(["x"]))
