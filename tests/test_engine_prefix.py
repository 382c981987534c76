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
    seen: list[list[int]] = []
    taken = 0
    for step in range(10):
        cut = rng.randrange(0, len(base))  # share the first `cut` tokens, then differ
        ids = base[:cut] + [rng.randrange(VOCAB) for _ in range(rng.randrange(1, 20))]
        fresh, h0, k0 = _prefill(model, ids)
        reused, h1, k1 = _prefill(model, ids, cache)
        # whole chunks of an earlier prompt's prefill, the one sharing most, token for token
        assert reused.reused == max((_whole(p, ids) for p in seen), default=0)
        assert _same(fresh, reused, len(ids)), step
        assert torch.equal(h0, h1) and torch.equal(k0, k1)
        taken += reused.reused
        seen.append(ids)
    assert taken > 0  # the cache was really used
    again, _, _ = _prefill(model, ids, cache)  # the same prompt: all its whole chunks
    assert again.reused == len(ids) // CHUNK * CHUNK > 0


def _whole(kept: list[int], ids: list[int]) -> int:
    """Positions of ``ids`` a kept prompt covers: shared tokens in its whole chunks."""
    common = 0
    while common < min(len(kept), len(ids)) and kept[common] == ids[common]:
        common += 1
    return min(common, len(kept) // CHUNK * CHUNK) // CHUNK * CHUNK


def test_interleaved_conversations_each_find_their_own_prefix(model):
    """A client sending A, then B (another beginning), then A extended: the third reuses
    A's chunks, not nothing; the least recently used prompt goes when space runs out."""
    rng = random.Random(1)
    a = [rng.randrange(VOCAB) for _ in range(4 * CHUNK)]
    b = [rng.randrange(VOCAB) for _ in range(3 * CHUNK)]
    c = [rng.randrange(VOCAB) for _ in range(3 * CHUNK)]
    cache = PrefixCache(max_tokens=7 * CHUNK)
    _prefill(model, a, cache)
    _prefill(model, b, cache)
    fresh, _, _ = _prefill(model, a + [1, 2, 3])
    reused, _, _ = _prefill(model, a + [1, 2, 3], cache)  # supersedes a; keeps b
    assert reused.reused == 4 * CHUNK and _same(fresh, reused, 4 * CHUNK + 3)
    _prefill(model, c, cache)  # 4 + 3 + 3 chunks > 7: b, the least recently used, goes
    assert _prefill(model, b, cache)[0].reused == 0
    assert _prefill(model, c + [4], cache)[0].reused == 3 * CHUNK


def test_a_shared_beginning_is_kept_once_and_outlives_its_branches(model):
    """A client's conversations share a long beginning (aider: system prompt, repository map,
    the file) and branch after it: the beginning's rows are kept once, so many branches fit
    and the least recently used ones go, not the beginning the next request needs."""
    rng = random.Random(2)
    head = [rng.randrange(VOCAB) for _ in range(4 * CHUNK)]

    def branch() -> list[int]:
        return head + [rng.randrange(VOCAB) for _ in range(2 * CHUNK)]

    cache = PrefixCache(max_tokens=9 * CHUNK)  # the head and two or three branches
    for _ in range(6):
        _prefill(model, branch(), cache)
        assert cache.positions <= 9 * CHUNK
    assert len(cache.kept()) == 2  # 4 + 2 + 2 chunks; a third branch would pass 9
    ids = branch()
    fresh, h0, k0 = _prefill(model, ids)
    reused, h1, k1 = _prefill(model, ids, cache)
    assert reused.reused == 4 * CHUNK  # the head, though six prompts went through
    assert _same(fresh, reused, len(ids))
    assert torch.equal(h0, h1) and torch.equal(k0, k1)
    again, _, _ = _prefill(model, ids, cache)  # itself, kept as the newest branch
    assert again.reused == len(ids)


def test_a_prompt_that_ends_inside_a_kept_one_cuts_it(model):
    """A prompt that shares part of a kept one cuts that node at a chunk boundary; both
    prompts, and a third sharing the cut, find their rows bit for bit."""
    rng = random.Random(3)
    a = [rng.randrange(VOCAB) for _ in range(5 * CHUNK)]
    b = a[: 2 * CHUNK + 3] + [rng.randrange(VOCAB) for _ in range(2 * CHUNK)]
    cache = PrefixCache()
    _prefill(model, a, cache)
    assert _prefill(model, b, cache)[0].reused == 2 * CHUNK
    assert cache.positions == 5 * CHUNK + (len(b) // CHUNK - 2) * CHUNK
    for ids in (a, b, a[: 3 * CHUNK] + [1, 2]):
        fresh, _, _ = _prefill(model, ids)
        reused, _, _ = _prefill(model, ids, cache)
        assert reused.reused == max(_whole(a, ids), _whole(b, ids))
        assert _same(fresh, reused, len(ids))


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


@pytest.mark.parametrize(
    ("arch", "dtype", "quantized"),
    [("qwen2", torch.bfloat16, "q4"), ("llama", torch.float32, None)],
    ids=["qwen2-q4", "llama-float32"],
)
def test_decoded_rows_serve_the_next_prompt_on_the_exact_kernels(arch, dtype, quantized):
    """On the exact kernels every row is a single step's, so a generation keeps its decoded
    rows too: a prompt that repeats the answer (a repair, a chat going on) takes over the
    prompt and the answer, not whole chunks only, and generates what it generates fresh. The
    kept rows are a fresh prefill's bit for bit (KV rows, hooked layer)."""
    from tests.test_kernels import _packed

    model = _packed(arch, dtype, quantized=quantized)
    cache = PrefixCache()
    cfg = GenerationConfig(max_new_tokens=40)
    prompt = random_prompt(0)
    first = generate(model, prompt, cfg, "adapld", prefix=cache)
    assert first.stats.accepted_draft_tokens > 0  # drafts were accepted, so tree rows were kept
    key, ids = cache.kept()[0]
    assert ids == prompt + first.tokens[:-1]  # the last token was never fed
    taken, entry = cache.lookup(key, ids, 1)
    assert taken == len(ids) and entry.ids == ids
    fresh = ModelRunner(model, hidden_layer=None, want_hidden=True)
    hidden, _ = fresh.prefill(entry.ids, 0)
    n = len(entry.ids)
    for layer, k, v in zip(fresh.cache.layers, entry.keys, entry.values, strict=True):
        assert torch.equal(layer.keys[:, :, :n], k) and torch.equal(layer.values[:, :, :n], v)
    assert torch.equal(hidden, entry.hidden)
    follow = prompt + first.tokens + [5, 6, 7] + prompt[:9]
    ref = generate(model, follow, cfg, "adapld")
    out = generate(model, follow, cfg, "adapld", prefix=cache)
    assert out.tokens == ref.tokens
    assert out.stats.cached_tokens == n  # not a multiple of the chunk: any shared prefix
