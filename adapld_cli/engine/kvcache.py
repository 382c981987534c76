"""A KV cache that is written in place: preallocated buffers and a length per layer.

Transformers' ``DynamicLayer`` concatenates every pass's keys and values onto the cache, so
each pass copies the whole cache of every layer, and compacting a draft tree to its accepted
path copies it again (docs/design.md, "KV cache written in place"). A
:class:`GrowingLayer` keeps ``[batch, heads, capacity, head_dim]`` buffers and a length:

- :meth:`GrowingLayer.update` writes the new rows after the cached ones and returns views of
  the first ``length`` rows (each head's rows contiguous, heads ``capacity`` rows apart: the
  native exact attention reads them in place);
- ``crop`` moves the length back; :meth:`GrowingLayer.keep` compacts a tree pass to its
  accepted rows with one in-place copy of those rows;
- capacity doubles when a pass would not fit (one copy, amortised), from the hint given;
- with :attr:`GrowingLayer.slots` set (static passes, :mod:`adapld_cli.engine.graphs`),
  ``update`` writes the rows at those slots and returns the whole buffers (or their first
  :attr:`GrowingLayer.span` rows), so a pass has the same shapes whatever the length (what a
  CUDA graph needs); the caller then sets the length.
  :meth:`GrowingLayer.clear_tail` zeroes the rows past the length first, so rows never
  written hold finite values under the mask;
- :attr:`GrowingLayer.low` is the first row that may have changed since a static pass last
  read the cache (rows appended, compacted or a new generation's), so that copies kept of
  it (key planes, :class:`adapld_cli.engine.graphs.KeyPlanes`) refresh only those.

The values are the same bits a ``DynamicLayer`` would hold, so the forward computes the same
results; only where they live changes. :func:`new_cache` builds a ``DynamicCache`` of these
layers for a model whose layers are all plain full-attention ones.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer


class GrowingLayer(DynamicLayer):
    """One layer's keys and values in preallocated buffers (module docstring)."""

    def __init__(self, capacity: int = 256) -> None:
        super().__init__()
        self._capacity = max(1, capacity)
        self._k: torch.Tensor | None = None  # [B, KV, capacity, d]
        self._v: torch.Tensor | None = None
        self._len = 0
        self.slots: torch.Tensor | None = None  # [n] int64 rows a static pass writes
        self.span: int | None = None  # ... and the rows it attends (None: all)
        # rows from here on may differ from what a static pass last saw (the caller of
        # static passes moves it up: KeyPlanes.sync)
        self.low = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        b, h, _, d = key_states.shape
        self._k = key_states.new_empty((b, h, self._capacity, d))
        self._v = value_states.new_empty((b, h, self._capacity, value_states.shape[-1]))
        self._len = 0
        self.low = 0
        self.is_initialized = True
        self._views()

    def _views(self) -> None:
        assert self._k is not None and self._v is not None
        self.keys = self._k[:, :, : self._len]
        self.values = self._v[:, :, : self._len]

    def reserve(self, length: int) -> None:
        """Room for ``length`` rows: the buffers grown (at least doubled) when they are
        shorter, the cached rows copied."""
        assert self._k is not None and self._v is not None
        if length <= self._k.shape[2]:
            return
        size = max(length, 2 * self._k.shape[2])
        for name in ("_k", "_v"):
            old = getattr(self, name)
            grown = old.new_empty((*old.shape[:2], size, old.shape[3]))
            grown[:, :, : self._len] = old[:, :, : self._len]
            setattr(self, name, grown)

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``[B, KV, n, d]`` keys and values; returns views of all cached rows. With
        :attr:`slots` set: write them at those rows and return the buffers' first
        :attr:`span` rows, ``[B, KV, span, d]`` (all ``capacity`` when None; the length is
        the caller's to set, :meth:`set_length`)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        assert self._k is not None and self._v is not None
        if self.slots is not None:
            self._k.index_copy_(2, self.slots, key_states)
            self._v.index_copy_(2, self.slots, value_states)
            if self.span is None:
                return self._k, self._v
            return self._k[:, :, : self.span], self._v[:, :, : self.span]
        n = key_states.shape[2]
        self.reserve(self._len + n)
        self.low = min(self.low, self._len)
        self._k[:, :, self._len : self._len + n] = key_states
        self._v[:, :, self._len : self._len + n] = value_states
        self._len += n
        self._views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self._len if self.is_initialized else 0

    @property
    def capacity(self) -> int:
        return 0 if self._k is None else self._k.shape[2]

    def clear_tail(self) -> None:
        """Zero the rows past the length (never written, or left by a longer pass)."""
        assert self._k is not None and self._v is not None
        self._k[:, :, self._len :].zero_()
        self._v[:, :, self._len :].zero_()

    def set_length(self, length: int) -> None:
        """After a static pass: the first ``length`` rows are the cache."""
        assert 0 <= length <= self.capacity
        self._len = length
        self._views()

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last ``-tokens_to_remove`` rows (transformers 5's negative count)."""
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative count of rows to remove")
        if tokens_to_remove == 0 or not self.is_initialized:
            return
        self._len = max(0, self._len + tokens_to_remove)
        self._views()

    def keep(self, prefix_len: int, rows: torch.Tensor) -> None:
        """Keep the first ``prefix_len`` rows followed by the rows at ``rows`` (int64 indices
        ``>= prefix_len``, ascending), in place."""
        if not self.is_initialized:
            return
        assert self._k is not None and self._v is not None
        end = prefix_len + rows.numel()
        self.low = min(self.low, prefix_len)
        for buf in (self._k, self._v):
            buf[:, :, prefix_len:end] = buf.index_select(2, rows)
        self._len = end
        self._views()

    def reset(self) -> None:
        self._len = 0
        self.low = 0
        if self.is_initialized:
            self._views()


def new_cache(config: Any, capacity: int = 256) -> DynamicCache:
    """A ``DynamicCache`` of :class:`GrowingLayer` layers, each preallocated for ``capacity``
    positions. Sliding-window layers (Gemma 3's) keep every position too when the model runs
    adapld's exact attention, which attends each query's last ``window`` keys itself
    (``model.kernels.window_plan``: a draft tree's mask carries no window). Raises
    ``ValueError`` for any other non-plain layer, and for sliding-window layers under another
    attention."""
    from adapld_cli.model.kernels import ATTENTION

    cache = DynamicCache(config=config)
    windowed = getattr(config, "_attn_implementation", None) == ATTENTION
    for layer in cache.layers:
        if type(layer) is DynamicLayer or (windowed and type(layer) is DynamicSlidingWindowLayer):
            continue
        raise ValueError("the model uses a sliding-window or hybrid cache")
    cache.layers = [GrowingLayer(capacity) for _ in cache.layers]
    return cache
