"""The prefix cache (engine/prefix.py): a prefill that takes over a previous prompt's shared
chunks holds bit for bit what a fresh prefill holds, and generation from it is unchanged."""

from __future__ import annotations

import random

import pytest
import torch

from adapld_cli.engine import GenerationConfig, PrefixCache, generate
from adapld_cli.engine import runner as runner_module
from adapld_cli.engine.runner import ModelRunner
from tests.tiny_models import VOCAB, one_thread, random_prompt, tiny_model

CHUNK = 8  # small prefill chunks, so the tiny prompts span several


@pytest.fixture(autouse=True)
def _small_chunks(monkeypatch):
    monkeypatch.setattr(runner_module, "PREFILL_CHUNK", CHUNK)
    with one_thread():
        yield


@pytest.fixture(
    scope="module", params=[("llama", "float64"), ("qwen2", "bfloat16"), ("gpt2", "float32")]
)
def model(request):
    arch, dtype = request.param
    return tiny_model(arch, dtype=dtype)


def _prefill(model, ids, prefix=None):
    runner = ModelRunner(model, hidden_layer=None, want_hidden=True, keep_final=True)
    hidden, topk = runner.prefill(ids, 3, prefix=prefix)
    return runner, hidden, topk


def _same(a: ModelRunner, b: ModelRunner, n: int) -> bool:
    layers = zip(a.cache.layers, b.cache.layers, strict=True)
    return all(
        torch.equal(x.keys, y.keys) and torch.equal(x.values, y.values) for x, y in layers
    ) and torch.equal(a._final[:n], b._final[:n])


def test_taken_over_chunks_hold_what_a_fresh_prefill_holds(model):
    rng = random.Random(0)
    cache = PrefixCache()
    base = random_prompt(1)[:30]
    prev: list[int] = []
    taken = 0
    for step in range(10):
        cut = rng.randrange(0, len(base))  # share the first `cut` tokens, then differ
        ids = base[:cut] + [rng.randrange(VOCAB) for _ in range(rng.randrange(1, 20))]
        fresh, h0, k0 = _prefill(model, ids)
        reused, h1, k1 = _prefill(model, ids, cache)
        common = 0
        while common < min(len(prev), len(ids)) and prev[common] == ids[common]:
            common += 1
        # whole chunks of the previous prompt's prefill, shared token for token
        assert reused.reused == min(common, len(prev) // CHUNK * CHUNK) // CHUNK * CHUNK
        assert _same(fresh, reused, len(ids)), step
        assert torch.equal(h0, h1) and torch.equal(k0, k1)
        taken += reused.reused
        prev = ids
    assert taken > 0  # the cache was really used
    again, _, _ = _prefill(model, prev, cache)  # the same prompt: all its whole chunks
    assert again.reused == len(prev) // CHUNK * CHUNK > 0


def test_generation_through_the_cache_is_unchanged(model):
    cache = PrefixCache()
    cfg = GenerationConfig(max_new_tokens=24)
    taken = 0
    for seed in range(4):
        prompt = random_prompt(seed)
        for variant in (prompt, prompt[:-3] + [5, 6, 7], prompt):  # VOCAB > 7
            ref = generate(model, variant, cfg, "adapld")
            out = generate(model, variant, cfg, "adapld", prefix=cache)
            assert out.tokens == ref.tokens
            assert out.stats.cached_tokens % CHUNK == 0
            taken += out.stats.cached_tokens
            assert ref.stats.cached_tokens == 0
    assert taken > 0


def test_other_settings_do_not_share_rows(model):
    cache = PrefixCache()
    ids = random_prompt(3)
    _prefill(model, ids, cache)
    runner = ModelRunner(model, hidden_layer=None, want_hidden=False)  # no hook, no finals
    runner.prefill(ids, 0, prefix=cache)
    assert runner.reused == 0
