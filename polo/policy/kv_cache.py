"""The sampler's KV cache: keys and values written in place into buffers reserved for the whole decode.

Hugging Face's ``DynamicCache`` appends each new position by ``cat``, which copies a layer's whole cache on every
decoded token (quadratic in the length: at 32 rows × 128 tokens of the base model the copies cost about as
much as the attention itself). ``ReservedLayer`` allocates ``[rows, heads, capacity, head_dim]`` once, writes
each step's keys and values into the next free positions and hands attention views of the filled prefix
(``buffer[:rows, :, :length]``: strided views, which SDPA reads without copying). Finished rows leave by moving
the kept rows to the front of the same buffers (gathered through a temporary; the buffers stay). A decode that outgrows the reservation
doubles it (one copy). The values attention sees are the ones ``cat`` would give, position for position, so
decoding is unchanged bit for bit.
"""
from __future__ import annotations

import torch
from torch import Tensor
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class ReservedLayer(DynamicLayer):
    """One full-attention layer's cache in reserved buffers (module docstring); ``reserve``: the positions to
    hold beyond the first update's (the tokens to be decoded after the prefill)."""

    def __init__(self, reserve: int):
        super().__init__()
        self.reserve, self.rows, self.length = reserve, 0, 0
        self.key_store = self.value_store = None

    def lazy_initialization(self, key_states: Tensor, value_states: Tensor) -> None:
        """Buffers for the first update's rows and positions plus ``reserve`` positions."""
        self.dtype, self.device, self.rows = key_states.dtype, key_states.device, key_states.shape[0]
        self._allocate(key_states.shape[2] + self.reserve, key_states, value_states)
        self.is_initialized = True

    def update(self, key_states: Tensor, value_states: Tensor, *args, **kwargs) -> tuple[Tensor, Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        q = key_states.shape[2]
        if self.length + q > self.key_store.shape[2]:
            self._allocate(2 * (self.length + q), key_states, value_states)
        self.key_store[: self.rows, :, self.length: self.length + q] = key_states
        self.value_store[: self.rows, :, self.length: self.length + q] = value_states
        self.length += q
        self._expose()
        return self.keys, self.values

    def _allocate(self, capacity: int, key_states: Tensor, value_states: Tensor) -> None:
        """Buffers of ``capacity`` positions for ``self.rows`` rows, holding the filled prefix (if any)."""
        stores = []
        for store, like in ((self.key_store, key_states), (self.value_store, value_states)):
            new = like.new_empty(self.rows, like.shape[1], capacity, like.shape[3])
            if store is not None:
                new[:, :, : self.length] = store[: self.rows, :, : self.length]
            stores.append(new)
        self.key_store, self.value_store = stores

    def _expose(self) -> None:
        self.keys = self.key_store[: self.rows, :, : self.length]
        self.values = self.value_store[: self.rows, :, : self.length]

    def get_seq_length(self) -> int:
        return self.length

    def batch_select_indices(self, indices: Tensor) -> None:
        """Keep rows ``indices`` (in that order): fewer rows move to the front of the buffers in place; more rows
        (a prefill expanded to the batch) get new buffers of the same capacity."""
        if not self.is_initialized:
            return
        n, stores = len(indices), []
        for store in (self.key_store, self.value_store):
            kept = store[:, :, : self.length][indices]
            if n > store.shape[0]:
                store = store.new_empty(n, *store.shape[1:])
            store[:n, :, : self.length] = kept
            stores.append(store)
        self.key_store, self.value_store = stores
        self.rows = n
        self._expose()

    def batch_repeat_interleave(self, repeats: int) -> None:
        self.batch_select_indices(torch.arange(self.rows, device=self.device).repeat_interleave(repeats))

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("the sampler's reserved KV cache is never cropped")


def reserved_cache(config, reserve: int) -> DynamicCache:
    """A ``DynamicCache`` for ``config`` whose full-attention layers are ``ReservedLayer``s holding ``reserve``
    positions beyond the prefill; other kinds of layer (sliding windows, linear attention) stay as Hugging Face
    builds them."""
    cache = DynamicCache(config=config)
    if cache.layer_class_to_replicate is DynamicLayer:  # no layer types in the config: full attention throughout
        cache.layer_class_to_replicate = lambda: ReservedLayer(reserve)
    cache.layers = [ReservedLayer(reserve) if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache
