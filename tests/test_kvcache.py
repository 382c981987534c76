"""The in-place KV cache (engine/kvcache.py) holds what a concatenating cache would hold."""

from __future__ import annotations

import pytest
import torch

from adapld_cli.engine.kvcache import GrowingLayer, new_cache


def test_growing_layer_matches_concatenation_through_appends_crops_and_keeps():
    gen = torch.Generator().manual_seed(0)
    layer = GrowingLayer(capacity=3)  # grows several times
    ref_k = ref_v = None
    for step in range(60):
        n = int(torch.randint(1, 9, (1,), generator=gen))
        k = torch.randn(1, 2, n, 8, generator=gen)
        v = torch.randn(1, 2, n, 8, generator=gen)
        keys, values = layer.update(k, v)
        ref_k = k if ref_k is None else torch.cat([ref_k, k], 2)
        ref_v = v if ref_v is None else torch.cat([ref_v, v], 2)
        assert torch.equal(keys, ref_k) and torch.equal(values, ref_v)
        prefix = ref_k.shape[2] - n
        if step % 3 == 0:  # a tree pass compacted to some of its rows
            idx = sorted(torch.randperm(n, generator=gen)[: max(1, n // 2)].tolist())
            sel = torch.tensor(idx) + prefix
            layer.keep(prefix, sel)
            ref_k = torch.cat([ref_k[:, :, :prefix], ref_k.index_select(2, sel)], 2)
            ref_v = torch.cat([ref_v[:, :, :prefix], ref_v.index_select(2, sel)], 2)
        elif step % 3 == 1 and n > 1:  # a chain pass cropped
            layer.crop(-(n - 1))
            ref_k, ref_v = ref_k[:, :, : -(n - 1)], ref_v[:, :, : -(n - 1)]
        assert layer.get_seq_length() == ref_k.shape[2]
        assert torch.equal(layer.keys, ref_k) and torch.equal(layer.values, ref_v)
    # views of one buffer: each head's rows contiguous, heads a capacity apart
    assert layer.keys.stride(-1) == 1 and layer.keys.stride(-2) == 8


def test_crop_takes_a_negative_count():
    layer = GrowingLayer()
    layer.update(torch.zeros(1, 1, 4, 2), torch.zeros(1, 1, 4, 2))
    with pytest.raises(ValueError):
        layer.crop(2)
    layer.crop(0)
    assert layer.get_seq_length() == 4


def test_new_cache_refuses_sliding_window_layers():
    from transformers import Qwen2Config

    config = Qwen2Config(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=100, use_sliding_window=True, sliding_window=8,
        max_window_layers=0, layer_types=["sliding_attention", "sliding_attention"],
    )  # fmt: skip
    with pytest.raises(ValueError, match="sliding"):
        new_cache(config)
    config.layer_types = ["full_attention", "full_attention"]
    config.use_sliding_window = False
    cache = new_cache(config, capacity=16)
    assert all(isinstance(layer, GrowingLayer) for layer in cache.layers)
