"""Losslessness: every method's output equals plain decoding, token for token, on many
random prompts (with and without copyable spans) across Llama, Qwen2 and GPT-2 (float64),
with drafts of every kind (copied, branch, semantic) accepted on the way; seeded sampling
draws plain sampling's tokens, and its multi-token distribution is the model's (chi-square)."""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import replace

import pytest

from adapld_cli.engine import AdaPLDSettings, GenerationConfig, generate, stream
from tests.tiny_models import VOCAB, one_thread, random_prompt, successor_lm, tiny_model


@pytest.fixture(autouse=True)
def _single_thread():
    with one_thread():
        yield


ARCHS = ["llama", "qwen2", "gpt2"]
# default (adaptive) settings, and a forced full tree so branches and the semantic
# fallback are exercised on every step
SETTINGS = {
    "adaptive": AdaPLDSettings(),
    "full-tree": AdaPLDSettings(
        adaptive=False,
        sim_floor=-1.0,
        node_budget=24,
        top_k=4,
        prompt_topk=True,
        pass_topk=True,
        semantic=True,
    ),
    "observed-topk": AdaPLDSettings(
        adaptive=False, sim_floor=-1.0, prompt_topk=False, pass_topk=False, semantic=True
    ),
    "no-cursor-no-rerank": AdaPLDSettings(
        cursor=False, rerank=False, adaptive=False, semantic=True
    ),
}


@pytest.fixture(scope="module", params=ARCHS)
def model(request):
    return tiny_model(request.param)


def test_greedy_identical_to_plain_decoding(model):
    """Every method and setting emits plain decoding's tokens on 8 prompts; the drafts were
    really verified: copied tokens accepted under every setting, and with the full tree also
    tokens from branches and from the semantic fallback (the tree path with an accepted
    branch is compared to plain decoding, not just drafted)."""
    accepted = {name: Counter() for name in [*SETTINGS, "pld"]}
    for seed in range(8):
        prompt = random_prompt(seed, repeats=seed % 4 != 3)
        cfg = GenerationConfig(max_new_tokens=48)
        ref = generate(model, prompt, cfg, "ar")
        assert len(ref.tokens) == 48 and ref.stop_reason == "max_new_tokens"
        assert ref.stats.forward_passes == 48 and ref.stats.accepted_draft_tokens == 0
        for name, settings in SETTINGS.items():
            out = generate(model, prompt, cfg, "adapld", settings=settings)
            assert out.tokens == ref.tokens, (name, seed)
            s = out.stats
            accepted[name].update(
                lexical=s.lexical_accepted, semantic=s.semantic_accepted, branch=s.branch_accepted
            )
        pld = generate(model, prompt, cfg, "pld")
        assert pld.tokens == ref.tokens, ("pld", seed)
        accepted["pld"].update(lexical=pld.stats.accepted_draft_tokens)
    for name, counts in accepted.items():
        assert counts["lexical"] > 0, (name, counts)
    for name in ("full-tree", "observed-topk"):
        assert accepted[name]["semantic"] > 0, (name, accepted[name])
    assert accepted["full-tree"]["branch"] > 0, accepted["full-tree"]


def _final_caches(monkeypatch):
    """Record each generation's KV cache as it ends (the runner's, when it closes)."""
    from adapld_cli.engine.runner import ModelRunner

    kept: list[list[tuple]] = []
    close = ModelRunner.close

    def record(self):
        kept.append([(layer.keys.clone(), layer.values.clone()) for layer in self.cache.layers])
        close(self)

    monkeypatch.setattr(ModelRunner, "close", record)
    return kept


def test_caches_equal_plain_decoding(model, monkeypatch):
    """Stronger than equal tokens: after each generation the KV cache of every layer (keys
    and values of every fed position, so every earlier layer's attention output) equals plain
    decoding's to float64 rounding, under every setting. Token identity on a tiny random
    model barely depends on attention (a verify pass that hid one key from every node changed
    the tokens of 0-3 prompts in 8); its caches always change."""
    import torch

    kept = _final_caches(monkeypatch)
    for seed in range(4):
        prompt = random_prompt(seed)
        cfg = GenerationConfig(max_new_tokens=40)
        kept.clear()
        generate(model, prompt, cfg, "ar")
        for settings in SETTINGS.values():
            generate(model, prompt, cfg, "adapld", settings=settings)
        ref, *others = kept
        for cache in others:
            for (k0, v0), (k1, v1) in zip(ref, cache, strict=True):
                assert k0.shape == k1.shape, seed
                torch.testing.assert_close(k1, k0, rtol=1e-10, atol=1e-12)
                torch.testing.assert_close(v1, v0, rtol=1e-10, atol=1e-12)


def test_drafts_are_accepted_and_counted(model):
    total_passes = total_tokens = accepted = 0
    for seed in range(6):
        out = generate(
            model,
            random_prompt(seed),
            GenerationConfig(max_new_tokens=48),
            "adapld",
            settings=SETTINGS["full-tree"],
        )
        s = out.stats
        total_passes += s.forward_passes
        total_tokens += s.new_tokens
        accepted += s.accepted_draft_tokens
        assert s.new_tokens == s.accepted_draft_tokens + s.forward_passes
        assert (
            s.lexical_accepted + s.semantic_accepted + s.branch_accepted == s.accepted_draft_tokens
        )
        assert s.drafted_tokens >= s.accepted_draft_tokens
        assert sum(k * v for k, v in s.accept_hist.items()) == s.new_tokens
    assert accepted > 0 and total_passes < total_tokens


def test_seeded_sampling_identical_to_plain_sampling(model):
    """Seeded sampling through the full draft tree draws exactly plain sampling's tokens, and
    drafts were accepted while sampling (the speculative path ran, not only the bonus token)."""
    accepted = 0
    for seed in range(3):
        prompt = random_prompt(seed)
        cfg = GenerationConfig(max_new_tokens=48, temperature=0.5, top_p=0.95, seed=seed)
        ref = generate(model, prompt, cfg, "ar")
        out = generate(model, prompt, cfg, "adapld", settings=SETTINGS["full-tree"])
        assert out.tokens == ref.tokens, seed
        accepted += out.stats.accepted_draft_tokens
        other = generate(model, prompt, replace(cfg, seed=seed + 1), "ar")
        assert other.tokens != ref.tokens  # the seed matters
    assert accepted > 0


# A copy-friendly model for sampling: after each token of CHAIN the next one is likely
# (probability ~0.7 at temperature 1), anything else possible; attention mixes in a little
# context. Prompts hold the chain, so n-gram drafts are accepted about as often as sampled.
CHAIN = [5, 9, 14, 20, 27, 33, 41, 2, 11, 30]
CUE = 7  # the token before the chain: (CUE, CHAIN[0]) at the prompt's end is a lexical hit


@pytest.fixture(scope="module")
def chain_model():
    return successor_lm(
        VOCAB, dict(zip(CHAIN, CHAIN[1:], strict=False)), hidden=64, strength=0.6, mix=0.3,
        dtype="float64",
    )  # fmt: skip


def chain_prompt(seed: int) -> list[int]:
    rng = random.Random(seed)
    others = [t for t in range(VOCAB) if t not in CHAIN and t != CUE]
    filler = [rng.choice(others) for _ in range(12)]
    return [*filler, CUE, *CHAIN, *filler[:5], CUE, CHAIN[0]]


def test_seeded_sampling_with_copied_drafts(chain_model):
    """Every method samples exactly plain sampling's tokens where copied drafts are accepted
    often: each speculative method accepted drafts."""
    accepted: Counter = Counter()
    for seed in range(4):
        prompt = chain_prompt(seed)
        cfg = GenerationConfig(max_new_tokens=32, temperature=1.0, seed=seed)
        ref = generate(chain_model, prompt, cfg, "ar").tokens
        for name, settings in (("adapld", None), ("full-tree", SETTINGS["full-tree"])):
            out = generate(chain_model, prompt, cfg, "adapld", settings=settings)
            assert out.tokens == ref, (name, seed)
            accepted[name] += out.stats.accepted_draft_tokens
        out = generate(chain_model, prompt, cfg, "pld")
        assert out.tokens == ref, ("pld", seed)
        accepted["pld"] += out.stats.accepted_draft_tokens
    assert all(accepted[name] > 0 for name in ("adapld", "full-tree", "pld")), accepted


def test_speculative_sampling_distribution_over_several_tokens(chain_model):
    """The first four sampled tokens follow the model's joint distribution (chi-square) while
    drafts are being accepted: binned by how many leading tokens follow the chain (0-4), whose
    exact probabilities come from the model's conditionals along the chain. Accepting a draft
    the sampler did not draw (or one token too many) skews the bins."""
    import torch
    from scipy.stats import chisquare

    prompt, n, runs = chain_prompt(0), 4, 300
    follow = []  # p(CHAIN[i + 1] | prompt + CHAIN[1 : i + 1])
    with torch.no_grad():
        for i in range(n):
            ids = torch.tensor([prompt + CHAIN[1 : i + 1]])
            probs = torch.softmax(chain_model(ids).logits[0, -1].double(), -1)
            follow.append(probs[CHAIN[i + 1]].item())
    expected = []
    for k in range(n + 1):  # exactly k leading tokens on the chain
        p = math.prod(follow[:k]) * (1.0 - follow[k] if k < n else 1.0)
        expected.append(p * runs)
    observed = [0] * (n + 1)
    accepted = 0
    for seed in range(runs):
        cfg = GenerationConfig(max_new_tokens=n, temperature=1.0, seed=seed)
        out = generate(chain_model, prompt, cfg, "adapld")
        k = 0
        while k < n and out.tokens[k] == CHAIN[k + 1]:
            k += 1
        observed[k] += 1
        accepted += out.stats.accepted_draft_tokens
    assert min(expected) >= 5  # every bin big enough for the test
    assert accepted > runs  # most runs took more than one token from a draft
    _, p = chisquare(observed, expected)
    assert p > 0.001, (observed, [round(e, 1) for e in expected])


def test_stream_events_and_stop_token(model):
    prompt = random_prompt(3)
    ref = generate(model, prompt, GenerationConfig(max_new_tokens=30), "ar").tokens
    stop = ref[10]
    first = ref.index(stop)
    cfg = GenerationConfig(max_new_tokens=30, stop_token_ids=(stop,))
    events = list(stream(model, prompt, cfg, "adapld"))
    tokens = [t for e in events for t in e.tokens]
    assert tokens == ref[: first + 1]
    assert events[-1].finished and events[-1].stop_reason == "eos"
    assert all(len(e.tokens) == len(e.sources) for e in events)
    assert not any(e.finished for e in events[:-1])


def test_reference_drafts_are_verified(model):
    """A predicted output (``reference``) only decides what is drafted: with the exact answer,
    a corrupted one (every fifth token changed, two tokens dropped) or noise as the
    reference, adapld and pld emit plain decoding's tokens; with the exact answer on prompts
    without copyable spans most tokens come from the reference, in far fewer passes."""
    rng = random.Random(0)
    exact_accepted = exact_tokens = 0
    for seed in range(6):
        prompt = random_prompt(seed, repeats=seed % 2 == 0)
        cfg = GenerationConfig(max_new_tokens=40)
        ref = generate(model, prompt, cfg, "ar").tokens
        corrupted = [(t + 1) % VOCAB if i % 5 == 4 else t for i, t in enumerate(ref)]
        del corrupted[10:12]
        noise = [rng.randrange(VOCAB) for _ in range(40)]
        for name, prediction in (("exact", ref), ("corrupted", corrupted), ("noise", noise)):
            for method in ("adapld", "pld"):
                out = generate(model, prompt, cfg, method, reference=prediction)
                assert out.tokens == ref, (name, method, seed)
                if name == "exact" and method == "adapld" and seed % 2:
                    exact_accepted += out.stats.accepted_draft_tokens
                    exact_tokens += out.stats.new_tokens
                    assert out.stats.forward_passes <= 12, out.stats.forward_passes
        assert generate(model, prompt, cfg, "ar", reference=ref).stats.forward_passes == 40
    assert exact_accepted >= 0.7 * exact_tokens, (exact_accepted, exact_tokens)
