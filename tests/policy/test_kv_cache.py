"""The sampler's reserved KV cache (polo.policy.kv_cache) against Hugging Face's growing ``DynamicCache`` (the
sampler with either: tests/engines/test_sampler.py)."""
import pytest
import torch
from transformers import DynamicCache, Qwen2Config
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

from polo.policy.kv_cache import ReservedLayer, reserved_cache


def states(rows: int, q: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, 2, q, 4, generator=g), torch.randn(rows, 2, q, 4, generator=g)


@pytest.mark.parametrize("reserve", [0, 3, 64])
def test_updates_and_row_selection_give_dynamic_caches_tensors(reserve):
    """Prefill of 3 distinct rows expanded to 6, decode steps, finished rows dropped, more steps: the views the
    layer hands attention equal ``cat``'s tensors exactly, including when the reservation is outgrown."""
    reserved, dynamic = ReservedLayer(reserve), DynamicLayer()
    plan = [("update", 3, 5), ("select", torch.tensor([0, 0, 1, 1, 2, 2])), ("update", 6, 1), ("update", 6, 1),
            ("select", torch.tensor([1, 2, 4])), ("update", 3, 1), ("select", torch.tensor([2])), ("update", 1, 2)]
    for seed, (op, *args) in enumerate(plan):
        if op == "update":
            k, v = states(*args, seed)
            got, want = reserved.update(k, v), dynamic.update(k, v)
            assert all(torch.equal(a, b) for a, b in zip(got, want))
        else:
            reserved.batch_select_indices(args[0])
            dynamic.batch_select_indices(args[0])
        assert torch.equal(reserved.keys, dynamic.keys) and torch.equal(reserved.values, dynamic.values)
        assert reserved.get_seq_length() == dynamic.get_seq_length()


def test_decode_steps_write_in_place_without_new_buffers():
    layer = ReservedLayer(reserve=8)
    layer.update(*states(4, 5, 0))
    store = layer.key_store.data_ptr()
    for seed in range(8):
        layer.update(*states(4, 1, seed + 1))
    layer.batch_select_indices(torch.tensor([0, 3]))
    assert layer.key_store.data_ptr() == store and layer.key_store.shape[2] == 13  # 5 prompt + 8 reserved
    assert layer.keys.data_ptr() == store  # attention reads the buffer itself (a view, no copy)


def test_full_attention_layers_are_reserved_and_sliding_windows_stay_as_hugging_face_builds_them():
    config = Qwen2Config(hidden_size=32, num_attention_heads=2, num_key_value_heads=2, num_hidden_layers=2,
                         vocab_size=50, use_sliding_window=True, sliding_window=4, max_window_layers=1)
    assert config.layer_types == ["full_attention", "sliding_attention"]
    layers = reserved_cache(config, 7).layers
    assert type(layers[0]) is ReservedLayer and layers[0].reserve == 7
    assert type(layers[1]) is DynamicSlidingWindowLayer
