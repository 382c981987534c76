"""Unit tests of the engine's parts: n-gram index, tree mask, acceptance walk, stops,
cache compaction, cost model."""

from __future__ import annotations

import random

import pytest
import torch

from adapld_cli.engine.cost import PRIOR, CostModel
from adapld_cli.engine.ngram import NgramIndex
from adapld_cli.engine.runner import ModelRunner, UnsupportedModelError
from adapld_cli.engine.stops import StopChecker
from adapld_cli.engine.tree import DraftTree, accept, tree_mask
from adapld_cli.engine.types import GenerationConfig, Source
from tests.tiny_models import one_thread, tiny_model


@pytest.fixture(autouse=True)
def _single_thread():
    with one_thread():
        yield


def test_ngram_index_matches_brute_force():
    rng = random.Random(1)
    toks = [rng.randrange(5) for _ in range(300)]
    idx = NgramIndex(1, 4)
    for chunk_start in range(0, len(toks), 7):  # incremental appends
        idx.extend(toks[chunk_start : chunk_start + 7])
        seen = toks[: chunk_start + 7]
        for n in range(1, 5):
            if len(seen) < n:
                continue
            key = seen[-n:]
            brute = [e for e in range(n - 1, len(seen) - 1) if seen[e - n + 1 : e + 1] == key]
            assert idx.query(n) == brute
    n, hits = idx.longest_match()
    assert n == max(k for k in range(1, 5) if idx.query(k)) and hits == idx.query(n)


def random_tree(rng: random.Random, n: int) -> DraftTree:
    tree = DraftTree.root(0)
    while len(tree) < n:
        tree.add(rng.randrange(40), rng.randrange(len(tree)), Source.LEXICAL)
    return tree


@pytest.mark.parametrize("seed", range(5))
def test_tree_mask_matches_ancestor_check(seed):
    rng = random.Random(seed)
    tree = random_tree(rng, 12)
    past = 5
    mask = tree_mask(tree.parents, past, torch.float32, "cpu")[0, 0]
    assert mask.shape == (12, past + 12)
    assert (mask[:, :past] == 0).all()
    for i in range(12):
        anc, j = set(), i
        while j >= 0:
            anc.add(j)
            j = tree.parents[j]
        for k in range(12):
            expected = 0.0 if k in anc else torch.finfo(torch.float32).min
            assert mask[i, past + k].item() == expected
    # depths follow parents
    for i, p in enumerate(tree.parents):
        assert tree.depths[i] == (0 if p < 0 else tree.depths[p] + 1)


def test_accept_walk():
    tree = DraftTree.root(7)
    a = tree.add(1, 0, Source.LEXICAL)
    b = tree.add(2, a, Source.LEXICAL)
    c = tree.add(3, 0, Source.BRANCH)
    d = tree.add(4, c, Source.BRANCH)
    assert tree.add(1, 0, Source.BRANCH) == a  # sibling with the same token is merged
    model_says = {0: 3, c: 4, d: 9, a: 2, b: 5}
    path, bonus = accept(tree, model_says.__getitem__)
    assert path == [0, c, d] and bonus == 9
    path, bonus = accept(tree, {0: 8}.__getitem__)
    assert path == [0] and bonus == 8
    assert not tree.is_chain


class CharTokenizer:
    """Decodes ids as characters of an alphabet (stop-string logic only needs ``decode``)."""

    alphabet = "abcdefghij`\n "

    def decode(self, ids):
        return "".join(self.alphabet[i] for i in ids)


def test_stops_earliest_wins():
    tok = CharTokenizer()
    bt = tok.alphabet.index("`")
    cfg = GenerationConfig(max_new_tokens=100, stop_strings=("```",), stop_token_ids=(9,))
    sc = StopChecker(cfg, tok, None)
    gen = [0, 1, bt, bt, bt, 2, 9]
    assert sc.cut(gen, 6) == (4, "stop_string")  # completes at the third backtick
    assert sc.cut([0, 1, 9, bt, bt, bt], 5) == (2, "eos")
    assert sc.cut([0, 1, 2], 2) == (2, None)
    sc2 = StopChecker(GenerationConfig(max_new_tokens=5), tok, 9)
    assert sc2.cut([0, 1, 2, 3, 4, 5, 6], 4) == (2, "max_new_tokens")
    assert sc2.cut([0, 1, 2, 3, 9, 5, 6], 4) == (2, "eos")
    # the stop string may straddle steps
    assert sc.cut([0, bt, bt, bt], 1) == (1, "stop_string")


def test_stop_block_ends_at_the_fence_that_closes_the_first_block():
    tok = CharTokenizer()
    ids = {c: i for i, c in enumerate(tok.alphabet)}
    sc = StopChecker(GenerationConfig(max_new_tokens=100, stop_block="```"), tok, None)

    def cut(text, new):
        return sc.cut([ids[c] for c in text], new)

    # words with inline backticks, a block opened with a language, the file, the fence
    text = "a `b` c\n```ab\nfg\n```\nhij"
    end = text.index("```\nhij") + 3
    assert cut(text, len(text)) == (end, "stop_string")
    assert cut(text[: end - 1], 5) == (5, None)  # the closing fence not complete yet
    assert cut("```\nab\n```", 11) == (11, "stop_string")  # a bare opening fence
    assert cut("```\nab", 6) == (6, None)  # an opening fence alone stops nothing
    assert cut("a\n``` b", 8) == (8, None)  # no line after the opening one
    assert cut("```\n```", 7) == (7, "stop_string")  # an empty block
    # the block may close in a later step than the one that opened it
    assert cut("```a\nb\n```", 1) == (1, "stop_string")


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_cache_compaction_matches_recompute(arch):
    model = tiny_model(arch)
    rng = random.Random(0)
    prefix = [rng.randrange(40) for _ in range(20)]
    runner = ModelRunner(model, hidden_layer=None, want_hidden=True)
    runner.prefill(prefix[:-1], top_k=0)
    tree = random_tree(rng, 10)
    tree.tokens[0] = prefix[-1]
    out = runner.step(tree.tokens, tree.depths, tree_mask(tree.parents, 19, model.dtype, "cpu"))
    # take a root-to-leaf path that is not a contiguous prefix of the node list
    leaf = max(range(len(tree)), key=lambda i: (tree.depths[i], i))
    path, j = [], leaf
    while j >= 0:
        path.append(j)
        j = tree.parents[j]
    path.reverse()
    runner.keep(19, path)
    seq = prefix + [tree.tokens[i] for i in path[1:]]
    assert runner.cache_len == len(seq)
    nxt = runner.step([5], None, None).logits.row(0)
    with torch.no_grad():
        full = model(torch.tensor([seq + [5]])).logits[0, -1]
    torch.testing.assert_close(nxt, full, rtol=1e-9, atol=1e-9)
    # tree logits equal sequential logits along the path too
    with torch.no_grad():
        ref = model(torch.tensor([seq])).logits[0, len(prefix) - 1 :]
    torch.testing.assert_close(out.logits.rows(path), ref, rtol=1e-9, atol=1e-9)


def test_unsupported_model_is_a_clear_error():
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config(vocab_size=32, d_model=16, d_ff=32, num_layers=1, num_heads=2, d_kv=8)
    with pytest.raises(UnsupportedModelError, match="encoder-decoder"):
        ModelRunner(T5ForConditionalGeneration(cfg), hidden_layer=None, want_hidden=False)


def test_cost_model_learns_the_measured_curve():
    cm = CostModel("cpu")
    assert cm.ratio(64) == pytest.approx(PRIOR["cpu"][64])  # the prior before any measurement
    for _ in range(10):
        cm.observe(1, 0.1)
        cm.observe(33, 0.1 * 17)
    assert cm.step_s == pytest.approx(0.1)
    assert cm.ratio(1) == pytest.approx(1.0)
    assert cm.ratio(33) == pytest.approx(17.0)
    assert cm.ratio(2) == pytest.approx(PRIOR["cpu"][2])  # unmeasured: prior shape, scaled
    assert PRIOR["cpu"][2] <= cm.ratio(20) <= 17.0
    sizes = [1, 2, 3, 5, 9, 17, 33, 65, 130]
    assert all(cm.ratio(a) <= cm.ratio(b) for a, b in zip(sizes, sizes[1:], strict=False))
    for _ in range(10):
        cm.observe(2, 0.1 * 2.2)  # a measured bucket replaces the prior
    assert cm.ratio(2) == pytest.approx(2.2)


def test_cost_model_of_one_static_shape_is_flat():
    """Passes of one static shape (``flat``) cost one pass up to the shape whatever was
    measured (an outlier, e.g. a pass that captured a graph, cannot make the drafter shrink
    its trees); their times still give the step's seconds; past the shape the curve is the
    measured one's as before."""
    cm = CostModel("cpu", flat=80)
    assert cm.ratio(2) == cm.ratio(80) == 1.0  # no prior: the shape is computed whole
    for n in (1, 65, 65, 65):
        cm.observe(n, 0.1)
    cm.observe(65, 5.0)  # an outlier at a large size
    assert cm.ratio(33) == cm.ratio(65) == cm.ratio(80) == 1.0
    assert 0.1 < cm.step_s < 5.0
    assert cm.ratio(160) > 1.0
    assert CostModel("cpu").ratio(64) == pytest.approx(PRIOR["cpu"][64])  # teeth: not flat


def test_hidden_states_are_normalised_when_read():
    """``Context.unit_hidden``: the recorded rows L2-normalised (as ``F.normalize`` of each
    recorded row), rows recorded again after a read normalised afresh."""
    from adapld_cli.engine.context import Context

    gen = torch.Generator().manual_seed(0)
    rows = torch.randn(12, 8, generator=gen, dtype=torch.float64).to(torch.bfloat16)
    ctx = Context(list(range(13)), 20, 8, 0, "cpu", CostModel("cpu"))
    ctx.record(0, rows[:7], None)
    expect = torch.nn.functional.normalize(rows.float(), dim=-1)
    assert torch.equal(ctx.unit_hidden(7), expect[:7])
    ctx.record(5, rows[5:12] * 3, None)  # a pass over rows already read: they come back raw
    assert torch.equal(ctx.hidden[5], (rows[5] * 3).float())
    again = torch.nn.functional.normalize((rows[5:12] * 3).float(), dim=-1)
    assert torch.equal(ctx.unit_hidden(12), torch.cat([expect[:5], again]))


def test_settings_resolve_every_device_default_once():
    """``AdaPLDSettings.resolve`` settles every device default (CUDA: uniform static passes
    with key planes and spans, top-K everywhere, the semantic fallback; a CPU: none of them),
    keeps what was set, and is idempotent; the drafter takes resolved settings only."""
    from dataclasses import asdict

    from adapld_cli.engine.drafters.adapld import AdaPLDDrafter
    from adapld_cli.engine.settings import SPAN_ROWS, TOP_K, TOP_K_FLAT, AdaPLDSettings

    device = ("top_k", "prompt_topk", "pass_topk", "semantic", "graphs", "uniform", "planes")
    cuda, cpu = AdaPLDSettings().resolve("cuda"), AdaPLDSettings().resolve("cpu")
    assert [getattr(cuda, f) for f in device] == [TOP_K_FLAT] + [True] * 6
    assert [getattr(cpu, f) for f in device] == [TOP_K] + [False] * 6
    assert (cuda.span, cpu.span) == (SPAN_ROWS, 0) and cuda.resolved and cpu.resolved
    assert not AdaPLDSettings().resolved
    assert cuda.resolve("cpu") == cuda and cpu.resolve("cuda") == cpu  # settled for good
    forced = AdaPLDSettings(uniform=True, semantic=False, span=64, hidden_layer=1)
    got = forced.resolve("cpu")
    assert (got.graphs, got.uniform, got.planes, got.top_k) == (True, True, False, TOP_K_FLAT)
    assert (got.semantic, got.span, got.hidden_layer, got.topk_lookup) == (False, 64, 1, None)
    untouched = {k: v for k, v in asdict(got).items() if k not in (*device, "span")}
    assert untouched == {k: v for k, v in asdict(forced).items() if k in untouched}
    with pytest.raises(ValueError):
        AdaPLDSettings(span=-1).resolve("cpu")
    with pytest.raises(ValueError):
        AdaPLDDrafter(AdaPLDSettings())
    drafter = AdaPLDDrafter(cpu)
    assert (drafter.semantic, drafter.prompt_topk, drafter.pass_topk) == (False, False, False)
    assert drafter.wants_topk == TOP_K and drafter.wants_hidden  # branches, rerank
