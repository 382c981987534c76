"""Static verify passes (engine/graphs.py, CUDA graphs on a GPU): on a CPU they run eagerly,
and here they are held to the engine's contract. Every method with ``graphs=True`` emits
plain (dynamic) decoding's tokens with drafts of every kind accepted, every pass really ran
static, and a static pass's rows and cache equal an eager pass's; passes that do not fit a
bucket, or a cache that grows, fall back or rebuild and stay exact."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import pytest
import torch

from adapld_cli.engine import AdaPLDSettings, GenerationConfig, Workspaces, generate
from adapld_cli.engine import workspaces as workspaces_module
from adapld_cli.engine.graphs import BUCKETS, bucket, key_span, uniform_shape
from adapld_cli.engine.runner import ModelRunner
from adapld_cli.engine.tree import DraftTree, tree_mask
from adapld_cli.engine.types import Source
from tests.test_engine_lossless import SETTINGS, _final_caches
from tests.tiny_models import one_thread, random_prompt, tiny_model


@pytest.fixture(autouse=True)
def _single_thread():
    with one_thread():
        yield


FULL_TREE = replace(SETTINGS["full-tree"], graphs=True)  # branches and semantic drafts


def test_buckets():
    assert [bucket(n) for n in (1, 2, 3, 4, 5, 6, 17, 18, 65, 66, 129)] == [
        1, 2, 3, 5, 5, 9, 17, 33, 65, 129, 129,
    ]  # fmt: skip
    assert bucket(130) is None and tuple(sorted(BUCKETS)) == BUCKETS
    assert [uniform_shape(b) for b in (0, 15, 16, 64, 100)] == [16, 16, 32, 80, 112]
    assert bucket(7, (80,)) == 80 and bucket(81, (80,)) is None


def _runs(monkeypatch) -> list[ModelRunner]:
    """Record every ModelRunner the loop makes (to read its static passes' counters)."""
    made: list[ModelRunner] = []
    init = ModelRunner.__init__

    def record(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(ModelRunner, "__init__", record)
    return made


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_static_passes_identical_to_plain_decoding(arch, monkeypatch):
    """ar, adapld and a full tree with static passes emit plain decoding's tokens on 6
    prompts; copied, branch and semantic drafts were accepted on the way; every pass of every
    static generation ran static (eagerly: no graph on a CPU)."""
    model = tiny_model(arch)
    made = _runs(monkeypatch)
    accepted = Counter()
    for seed in range(6):
        prompt = random_prompt(seed, repeats=seed != 5)
        cfg = GenerationConfig(max_new_tokens=48)
        ref = generate(model, prompt, cfg, "ar")
        for method, settings in (
            ("ar", AdaPLDSettings(graphs=True)),
            ("adapld", AdaPLDSettings(graphs=True)),
            ("adapld", FULL_TREE),
        ):
            made.clear()
            out = generate(model, prompt, cfg, method, settings=settings)
            assert out.tokens == ref.tokens, (method, seed)
            assert made[0].static is not None
            assert made[0].static_runs == out.stats.forward_passes
            assert made[0].graph_replays == 0 and out.stats.graph_passes == 0
            assert out.stats.graph_fallback == ""
            if method == "adapld":
                accepted.update(
                    lexical=out.stats.lexical_accepted,
                    branch=out.stats.branch_accepted,
                    semantic=out.stats.semantic_accepted,
                )
    assert accepted["lexical"] > 0 and accepted["branch"] > 0 and accepted["semantic"] > 0
    made.clear()
    generate(model, random_prompt(0), GenerationConfig(max_new_tokens=8), "adapld")
    assert made[0].static is None  # off by default


def _tree(rng: random.Random, n: int, root: int) -> DraftTree:
    tree = DraftTree.root(root)
    while len(tree) < n:
        tree.add(rng.randrange(40), rng.randrange(len(tree)), Source.LEXICAL)
    return tree


def _pass_pair(model, n: int, seed: int, hidden: bool = True):
    """An eager and a static runner after the same prefill, and one tree pass of ``n``
    nodes through each: ``(eager, static, tree, past, eager out, static out)``."""
    rng = random.Random(seed)
    prefix = [rng.randrange(40) for _ in range(30)]
    eager = ModelRunner(model, hidden_layer=None, want_hidden=hidden, capacity=100)
    static = ModelRunner(model, hidden_layer=None, want_hidden=hidden, capacity=100, static=True)
    for runner in (eager, static):
        runner.prefill(prefix[:-1], top_k=0)
    tree = _tree(rng, n, prefix[-1])
    past = len(prefix) - 1
    a = eager.step(tree.tokens, tree.depths, tree_mask(tree.parents, past, model.dtype, "cpu"))
    b = static.verify(tree.tokens, tree.parents, tree.depths)
    assert static.static is not None and static.static.runs == 1
    return eager, static, tree, past, a, b


def _deepest_path(tree: DraftTree) -> list[int]:
    leaf = max(range(len(tree)), key=lambda i: (tree.depths[i], i))
    path, j = [], leaf
    while j >= 0:
        path.append(j)
        j = tree.parents[j]
    return path[::-1]


@pytest.mark.parametrize("n", [1, 4, 9, 20])
def test_static_pass_rows_and_cache_equal_eager(n):
    """One tree pass (and then a chain) through a static runner gives the eager runner's
    logits and hooked states, and after compaction both caches hold the same rows. Stock
    attention sums over the whole buffer (zeros past the visible keys), so float64 rows
    agree to rounding; the exact kernels' agree bit for bit (next test)."""
    model = tiny_model("qwen2")
    eager, static, tree, past, a, b = _pass_pair(model, n, n)
    close = dict(rtol=1e-12, atol=1e-14)
    rows = list(range(n))
    torch.testing.assert_close(a.logits.rows(rows), b.logits.rows(rows), **close)
    torch.testing.assert_close(a.hidden, b.hidden, **close)
    path = _deepest_path(tree)
    for runner in (eager, static):
        runner.keep(past, path)
    assert eager.cache_len == static.cache_len == past + len(path)
    for la, lb in zip(eager.cache.layers, static.cache.layers, strict=True):
        torch.testing.assert_close(la.keys, lb.keys, **close)
        torch.testing.assert_close(la.values, lb.values, **close)
    chain = [3, 7, 11]
    c1 = eager.step(chain, None, None).logits.rows([0, 1, 2])
    c2 = static.verify(chain, None, None).logits.rows([0, 1, 2])
    torch.testing.assert_close(c1, c2, **close)


@pytest.mark.parametrize("quantized", [None, "q4"])
def test_static_pass_bitwise_on_exact_kernels(quantized, monkeypatch):
    """On the exact kernels with the lean forward (what users run on a CPU), each query
    attends exactly its keys whatever the buffer: a static pass's rows, hooked states and
    cache are an eager pass's bit for bit (bfloat16, dense and 4-bit), also for passes of one
    bucket in a row, and greedy adapld with static passes ends with plain decoding's tokens
    and KV cache, bit for bit."""
    from tests.test_kernels import _packed

    model = _packed("qwen2", torch.bfloat16, quantized=quantized)
    for n in (1, 9, 33):
        eager, static, tree, past, a, b = _pass_pair(model, n, n)
        rows = list(range(n))
        assert torch.equal(a.logits.rows(rows), b.logits.rows(rows)), n
        assert torch.equal(a.hidden, b.hidden), n
        path = _deepest_path(tree)
        for runner in (eager, static):
            runner.keep(past, path)
        for la, lb in zip(eager.cache.layers, static.cache.layers, strict=True):
            assert torch.equal(la.keys, lb.keys) and torch.equal(la.values, lb.values), n
        # static passes of one bucket in a row (nothing else between them) reuse its buffers
        chains = [
            [(5 * k + n + j) % 40 for j in range(size)] for k, size in enumerate((1, 1, 3, 3, 1))
        ]
        ys = [static.verify(c, None, None).logits.rows(list(range(len(c)))) for c in chains]
        xs = [eager.step(c, None, None).logits.rows(list(range(len(c)))) for c in chains]
        assert all(torch.equal(x, y) for x, y in zip(xs, ys, strict=True)), n
    kept = _final_caches(monkeypatch)
    for seed in range(3):
        prompt = random_prompt(seed)
        cfg = GenerationConfig(max_new_tokens=40)
        kept.clear()
        ref = generate(model, prompt, cfg, "ar")
        out = generate(model, prompt, cfg, "adapld", settings=AdaPLDSettings(graphs=True))
        assert out.tokens == ref.tokens and out.stats.accepted_draft_tokens > 0, seed
        for (k0, v0), (k1, v1) in zip(*kept, strict=True):  # every layer, bit for bit
            assert torch.equal(k0, k1) and torch.equal(v0, v1), seed


def test_passes_that_do_not_fit_and_a_growing_cache_stay_exact(monkeypatch):
    """A pass over the largest bucket runs eagerly; a static pass that lacks the room grows
    the cache first and the static passes are rebuilt on the new buffers (every pass still
    runs static); every pass's logits equal the eager runner's."""
    monkeypatch.setattr(workspaces_module, "WORKSPACE_ROWS", 8)  # a 24-row cache, as asked
    model = tiny_model("llama")
    rng = random.Random(0)
    runner = ModelRunner(model, hidden_layer=None, want_hidden=False, capacity=24, static=True)
    plain = ModelRunner(model, hidden_layer=None, want_hidden=False, capacity=24)
    ids = [rng.randrange(40) for _ in range(12)]
    for r in (runner, plain):
        r.prefill(ids, top_k=0)
    first = None
    for step in range(12):  # 3 tokens a pass: the cache grows past 24 rows, then 48
        chain = [rng.randrange(40) for _ in range(3)]
        x = runner.verify(chain, None, None).logits.rows([0, 1, 2])
        y = plain.step(chain, None, None).logits.rows([0, 1, 2])
        assert torch.equal(x, y), step
        first = first or runner.static
    assert runner.cache_len == 12 + 36 and runner.static is not first  # rebuilt after growth
    assert runner.static is not None and runner.static_runs == 12
    assert runner.cache.layers[0].capacity == 48  # 24 -> 48 (doubled)
    runs = runner.static_runs
    long = [rng.randrange(40) for _ in range(BUCKETS[-1] + 1)]
    x = runner.verify(long, None, None).logits.rows([0, len(long) - 1])
    y = plain.step(long, None, None).logits.rows([0, len(long) - 1])
    assert torch.equal(x, y) and runner.static_runs == runs  # no bucket holds it: eager


def test_the_next_generation_takes_over_the_static_cache(monkeypatch):
    """Generations one after the other on a model through one ``Workspaces`` share one
    static cache and its static passes (so captured graphs replay again); runners alive at
    once get their own; every output is plain decoding's; a generation of another rounded
    capacity gets its own, and so does each generation given no ``Workspaces``."""
    model = tiny_model("qwen2")
    made = _runs(monkeypatch)
    settings = AdaPLDSettings(graphs=True)
    cfg = GenerationConfig(max_new_tokens=32)
    ws = Workspaces()
    outs = []
    for seed in range(3):
        prompt = random_prompt(seed)
        ref = generate(model, prompt, cfg, "ar")
        out = generate(model, prompt, cfg, "adapld", settings=settings, workspaces=ws)
        assert out.tokens == ref.tokens, seed
        assert made[-1].static_runs == out.stats.forward_passes
        outs.append(made[-1])
    assert outs[0].cache is outs[1].cache is outs[2].cache
    assert outs[0].static is outs[1].static is outs[2].static
    kept = {"hidden_layer": None, "want_hidden": True, "static": True, "workspaces": ws}
    a = ModelRunner(model, capacity=100, **kept)
    b = ModelRunner(model, capacity=100, **kept)
    assert a.cache is not b.cache  # a is busy until closed
    a.close()
    c = ModelRunner(model, capacity=100, **kept)
    assert c.cache is a.cache
    c.close()
    # a workspace serves only generations of its own rounded capacity (the keys' width every
    # pass sees): what ran before never changes a pass's shapes
    d = ModelRunner(model, capacity=1500, **kept)
    assert d.cache is not a.cache
    assert d._workspace.capacity == 2 * workspaces_module.WORKSPACE_ROWS
    # no Workspaces passed: each generation gets its own, kept nowhere
    generate(model, random_prompt(0), cfg, "adapld", settings=settings)
    generate(model, random_prompt(0), cfg, "adapld", settings=settings)
    assert made[-1].cache is not made[-2].cache and made[-1].cache is not outs[0].cache


def _stock_bf16_model():
    """A random Qwen2 in bfloat16 on torch's stock kernels (sdpa attention, no exact kernels),
    wide enough that its products take other paths for other row counts."""
    model = tiny_model(
        "qwen2", dtype="bfloat16", hidden=256, intermediate=768, vocab=1024, positions=2048
    )
    assert model.config._attn_implementation == "sdpa"
    return model


def _copy_prompt(seed: int, vocab: int = 1024) -> list[int]:
    """~150-400 tokens with copied spans (random models repeat, so drafts hit)."""
    rng = random.Random(seed)
    base = [rng.randrange(vocab) for _ in range(rng.randrange(60, 160))]
    out = list(base)
    for _ in range(3):
        a = rng.randrange(len(base))
        out += [rng.randrange(vocab) for _ in range(3)] + base[a : a + rng.randrange(5, 40)]
    return out + base


def _tree_rows(model, prefix: list[int], tree: DraftTree, **passes) -> list[bool]:
    """Per node: are the tree pass's logits bitwise those of single steps down its root path,
    both through one runner after ``prefix[:-1]`` (``passes``: the runner's static, shapes and
    planes arguments; none = eager passes)?"""
    runner = ModelRunner(
        model, hidden_layer=None, want_hidden=False, capacity=len(prefix) + 256,
        static=bool(passes), **passes,
    )  # fmt: skip
    runner.prefill(prefix[:-1], top_k=0)
    past = runner.cache_len
    batch = runner.verify(tree.tokens, tree.parents, tree.depths).logits
    batch = batch.rows(list(range(len(tree))))
    same = []
    for i in range(len(tree)):
        path, j = [], i
        while j >= 0:
            path.append(j)
            j = tree.parents[j]
        runner.keep(past, [])
        for node in path[::-1]:
            row = runner.verify([tree.tokens[node]], None, None).logits.row(0)
        same.append(torch.equal(row, batch[i]))
    runner.close()
    return same


def test_uniform_passes_make_stock_bf16_kernels_exact(monkeypatch):
    """Torch's stock bfloat16 kernels are not batch-invariant (as a GPU's are not): a tree
    pass's rows are not single steps' bits, and greedy adapld may drift from ar. With
    ``uniform`` (every pass, ar's too, at one shape) the rows are single steps' bit for bit,
    on the copied chain and on branches, and ar, adapld and a full tree (lexical, branch and
    semantic drafts accepted) emit the same tokens; every pass ran at the one shape."""
    model = _stock_bf16_model()
    rng = random.Random(0)
    prefix = [rng.randrange(1024) for _ in range(200)]
    tree = _tree(rng, 40, prefix[-1])
    shape = uniform_shape(len(tree) - 1)

    assert sum(_tree_rows(model, prefix, tree)) < len(tree)  # teeth: eager rows differ
    assert all(_tree_rows(model, prefix, tree, shapes=(shape,)))
    assert any(tree.parents[i] != i - 1 for i in range(1, len(tree)))  # branches were rows

    made = _runs(monkeypatch)
    uniform = AdaPLDSettings(uniform=True)
    full = replace(FULL_TREE, uniform=True)
    cfg = GenerationConfig(max_new_tokens=64)
    accepted: Counter[str] = Counter()
    for seed in range(4):
        prompt = _copy_prompt(seed)
        want = generate(model, prompt, cfg, "ar", settings=uniform)
        assert made[-1].static.shapes == (80,)
        assert made[-1].static_runs == want.stats.forward_passes
        for settings in (uniform, full):
            out = generate(model, prompt, cfg, "adapld", settings=settings)
            assert out.tokens == want.tokens, seed
            assert made[-1].static.shapes == (uniform_shape(settings.node_budget),)
            assert made[-1].static_runs == out.stats.forward_passes
            accepted.update(
                lexical=out.stats.lexical_accepted,
                branch=out.stats.branch_accepted,
                semantic=out.stats.semantic_accepted,
            )
    # the teeth are the eager rows above: whether they also flip a greedy token depends on
    # the CPU's kernels (they did on AMD Zen 4, not on a Xeon with oneDNN capped at AVX-512)
    assert accepted["lexical"] > 0 and accepted["branch"] > 0 and accepted["semantic"] > 0


def test_key_planes_make_branch_rows_exact():
    """Uniform passes alone leave a branch node's keys a few rows further on than plain
    decoding puts them, and torch's stock float32 attention rounds by place: branch rows
    differ (the chain's do not). With key planes each row attends its keys in plain
    decoding's places and every row is the single step's, bit for bit (here: the real model
    on these kernels still differs, the attention kernel's batch items not being independent
    of each other; docs/design.md). Greedy ar and adapld with planes agree."""
    from tests.test_kernels import dfs_tree

    model = tiny_model(
        "qwen2", dtype="float32", hidden=256, intermediate=768, vocab=1024, positions=2048
    )
    rng = random.Random(0)
    prefix = [rng.randrange(1024) for _ in range(834)]
    tree = DraftTree.root(prefix[-1])
    for parent in dfs_tree(40, 0, chain=12)[1:]:
        tree.add(rng.randrange(1024), parent, Source.LEXICAL)
    chain = [all(tree.parents[j] == j - 1 for j in range(1, i + 1)) for i in range(len(tree))]
    shapes = (uniform_shape(len(tree) - 1),)
    plain = _tree_rows(model, prefix, tree, shapes=shapes)
    assert all(s for s, c in zip(plain, chain, strict=True) if c)
    assert not all(plain)  # teeth: some branch row differs without planes
    assert all(_tree_rows(model, prefix, tree, shapes=shapes, planes=True))

    settings = replace(FULL_TREE, uniform=True, planes=True)
    for seed in range(2):
        prompt = _copy_prompt(seed)
        cfg = GenerationConfig(max_new_tokens=48)
        want = generate(model, prompt, cfg, "ar", settings=settings).tokens
        out = generate(model, prompt, cfg, "adapld", settings=settings)
        assert out.tokens == want and out.stats.accepted_draft_tokens > 0, seed


def _span_rows(model, prefix: list[int], tree: DraftTree, span: int, planes: bool) -> torch.Tensor:
    """Logits ``[len(tree), vocab]`` of one uniform tree pass after ``prefix[:-1]`` whose
    attention reads the cache's keys in spans of ``span`` rows (0: the whole cache)."""
    runner = ModelRunner(
        model, hidden_layer=None, want_hidden=False, capacity=len(prefix) + 256, static=True,
        shapes=(uniform_shape(len(tree) - 1),), planes=planes, span=span,
    )  # fmt: skip
    runner.prefill(prefix[:-1], top_k=0)
    out = runner.verify(tree.tokens, tree.parents, tree.depths).logits
    rows = out.rows(list(range(len(tree)))).clone()
    (keys,) = {b.span for b in runner.static._buckets.values()}
    assert keys == (key_span(len(prefix) - 1, 48, span, 2048) if span else 2048)
    runner.close()
    return rows


def test_key_spans_attend_only_the_keys_in_use(monkeypatch):
    """A static pass with a key span attends the cache's first multiple of ``span`` rows past
    the pass instead of the whole preallocated cache (2,048 rows here): the keys left out
    were masked for every row, so a tree pass's logits are the whole cache's bit for bit
    (stock bfloat16 attention, with key planes and without), and greedy ar and adapld (a
    full tree) through passes of several spans emit the whole-cache passes' tokens."""
    from tests.test_kernels import dfs_tree

    assert [key_span(100, 80, 512, 4096), key_span(432, 80, 512, 4096)] == [512, 512]
    assert [key_span(433, 80, 512, 4096), key_span(4000, 80, 512, 4096)] == [1024, 4096]
    assert key_span(100, 80, 0, 4096) == 4096
    assert AdaPLDSettings().key_span("cuda") == 512 and AdaPLDSettings().key_span("cpu") == 0
    assert AdaPLDSettings(span=64).key_span("cpu") == 64
    with pytest.raises(ValueError):
        AdaPLDSettings(span=-1).key_span("cuda")
    from adapld_cli.engine.kvcache import GrowingLayer

    layer = GrowingLayer(64)
    layer.slots, layer.span = torch.tensor([3]), 16  # what a static pass sets
    k, v = layer.update(torch.ones(1, 2, 1, 4), torch.ones(1, 2, 1, 4))
    assert k.shape == v.shape == (1, 2, 16, 4) and k.data_ptr() == layer._k.data_ptr()

    model = _stock_bf16_model()
    rng = random.Random(0)
    prefix = [rng.randrange(1024) for _ in range(834)]
    tree = DraftTree.root(prefix[-1])
    for parent in dfs_tree(40, 0, chain=12)[1:]:
        tree.add(rng.randrange(1024), parent, Source.LEXICAL)
    for planes in (True, False):
        whole = _span_rows(model, prefix, tree, 0, planes)
        for span in (16, 512):
            assert torch.equal(_span_rows(model, prefix, tree, span, planes), whole), span

    made = _runs(monkeypatch)
    cfg = GenerationConfig(max_new_tokens=64)
    base = replace(FULL_TREE, uniform=True, planes=True)
    accepted = 0
    for seed in range(2):
        prompt = _copy_prompt(seed)
        want = generate(model, prompt, cfg, "ar", settings=base).tokens
        for method in ("ar", "adapld"):
            out = generate(model, prompt, cfg, method, settings=replace(base, span=16))
            assert out.tokens == want, (method, seed)
            spans = {s for _, s in made[-1].static._buckets}
            assert len(spans) > 1 and max(spans) < made[-1].static.capacity, spans
            accepted += out.stats.accepted_draft_tokens
    assert accepted > 0


def test_kept_key_planes_copy_only_each_pass_rows(monkeypatch):
    """Key planes kept from pass to pass (``KeyPlanes``, the default with one pass shape):
    at every layer of every pass each row's plane holds, up to its position, exactly the keys
    and values a plane gathered whole from the cache holds (the prefix, then its ancestors
    in order); a pass writes ``2b`` rows of each plane, not ``b x s``, and a tree pass's
    logits are the gathered planes' bit for bit. Checked through
    generations one after the other in one workspace (a new prompt: the planes copy the
    changed rows first), a prompt shorter than the pass, and branch steps that compact the
    cache; ar and a full tree emit the same tokens, and so do planes gathered whole
    (``ADAPLD_KEPT_PLANES=0``)."""
    from adapld_cli.engine.graphs import KeyPlanes, StaticPasses

    model = _stock_bf16_model()
    checked, writes, caught_up = Counter(), Counter(), [0]
    planes, sync = KeyPlanes.planes, KeyPlanes.sync

    def check(self, buf, key, value):
        k, v = planes(self, buf, key, value)
        b, length = self.rows, int(buf.slots[0])
        assert buf.dst.shape == (2 * b,) and buf.gather is None
        writes[buf.dst.numel()] += 1
        for r in range(b):
            pos = int(buf.pos[0, r])
            rows = torch.cat([torch.arange(length), buf.src[r, b:]])[: pos + 1]
            assert torch.equal(k[r, :, : pos + 1], key[0][:, rows]), (length, r)
            assert torch.equal(v[r, :, : pos + 1], value[0][:, rows]), (length, r)
        checked["rows"] += b
        return k, v

    def count_sync(self, layers, length):
        caught_up[0] += min(layer.low for layer in layers) < length - self.rows
        return sync(self, layers, length)

    monkeypatch.setattr(KeyPlanes, "planes", check)
    monkeypatch.setattr(KeyPlanes, "sync", count_sync)
    made = _runs(monkeypatch)
    cfg = GenerationConfig(max_new_tokens=40)
    settings = replace(FULL_TREE, uniform=True, planes=True)
    ws = Workspaces()
    outs, branch = [], 0
    for prompt in (_copy_prompt(0), _copy_prompt(1)[:50], _copy_prompt(2)):
        want = generate(model, prompt, cfg, "ar", settings=settings, workspaces=ws).tokens
        out = generate(model, prompt, cfg, "adapld", settings=settings, workspaces=ws)
        assert out.tokens == want and out.stats.accepted_draft_tokens > 0
        assert isinstance(made[-1].static, StaticPasses) and made[-1].static.kept is not None
        branch += out.stats.branch_accepted + out.stats.semantic_accepted
        outs.append(out.tokens)
    shape = uniform_shape(settings.node_budget)
    assert branch > 0 and checked["rows"] > 0 and set(writes) == {2 * shape}
    assert caught_up[0] >= 4  # each generation's first passes copied the new prompt's rows
    # one workspace for each method's generations (ar's runners hook no layer: another)
    assert made[0].cache is made[2].cache is made[4].cache
    assert made[1].cache is made[3].cache is made[5].cache

    monkeypatch.setenv("ADAPLD_KEPT_PLANES", "0")
    ws = Workspaces()  # new static passes: planes gathered whole
    checked.clear()
    for prompt, tokens in zip((_copy_prompt(0), _copy_prompt(1)[:50]), outs, strict=False):
        out = generate(model, prompt, cfg, "adapld", settings=settings, workspaces=ws)
        assert out.tokens == tokens
        assert made[-1].static.kept is None and made[-1].static_runs > 0
    assert not checked  # gathered whole: the kept planes were not used

    # one tree pass after 833 tokens: the logits of kept planes are gathered planes' bit for bit
    from tests.test_kernels import dfs_tree

    rng = random.Random(0)
    prefix = [rng.randrange(1024) for _ in range(834)]
    tree = DraftTree.root(prefix[-1])
    for parent in dfs_tree(40, 0, chain=12)[1:]:
        tree.add(rng.randrange(1024), parent, Source.LEXICAL)
    gathered = _span_rows(model, prefix, tree, 16, True)
    monkeypatch.delenv("ADAPLD_KEPT_PLANES")
    assert torch.equal(_span_rows(model, prefix, tree, 16, True), gathered)
    assert checked["rows"] > 0


def test_a_warm_up_prepares_every_key_span(monkeypatch):
    """``Workspaces.prepare`` (the bench's warm-up) runs a static pass of every key span a
    free workspace's cache can reach and none has used (on a GPU: captures its graph), once;
    the cache, the counters and the key planes are as before, so later generations emit
    plain decoding's tokens and run no new span."""
    model = _stock_bf16_model()
    made = _runs(monkeypatch)
    cfg = GenerationConfig(max_new_tokens=24)
    settings = replace(FULL_TREE, uniform=True, planes=True, span=128)
    prompts = [_copy_prompt(0)[:200], _copy_prompt(1)]
    ws = Workspaces()
    generate(model, prompts[0], cfg, "adapld", settings=settings, workspaces=ws)
    static = made[-1].static
    used = set(static._buckets)
    ran = ws.prepare()
    spans = {s for _, s in static._buckets}
    assert ran == len(spans) - len(used) > 0 and max(spans) == static.capacity
    assert spans == {min(s, static.capacity) for s in range(128, static.capacity + 128, 128)}
    assert ws.prepare() == 0  # once
    for prompt in prompts:
        want = generate(model, prompt, cfg, "ar", settings=settings, workspaces=ws).tokens
        out = generate(model, prompt, cfg, "adapld", settings=settings, workspaces=ws)
        assert out.tokens == want and made[-1].static is static
        assert made[-1].static_runs == out.stats.forward_passes
        assert {s for _, s in static._buckets} == spans  # nothing new to run


def test_uniform_drafts_fill_the_shape_and_first_passes_are_not_timed(monkeypatch):
    """Uniform passes compute every row of their one shape, so adapld drafts up to the
    shape's rows (here 31 nodes for ``node_budget`` 24; the cost model is flat up to the
    shape), not the node budget, rows the copy leaves free holding recycled successors, and
    still emits plain decoding's tokens. Passes of several
    shapes keep their measured curve, but the first pass of each (shape, span), which on a GPU
    captured its graph, is not timed into it."""
    from adapld_cli.engine.cost import CostModel

    model = tiny_model("qwen2")
    made = _runs(monkeypatch)
    sizes: list[int] = []
    verify = ModelRunner.verify

    def record(self, ids, *args, **kwargs):
        sizes.append(len(ids))
        return verify(self, ids, *args, **kwargs)

    monkeypatch.setattr(ModelRunner, "verify", record)
    timed: list[int] = []
    observe = CostModel.observe

    def count(self, n, seconds):
        timed.append(n)
        observe(self, n, seconds)

    monkeypatch.setattr(CostModel, "observe", count)
    base = random_prompt(0, repeats=False)
    prompt = base + base[: len(base) // 2]  # a copy source longer than any pass
    cfg = GenerationConfig(max_new_tokens=96)
    budget = 24
    want = generate(model, prompt, cfg, "ar").tokens
    uniform = AdaPLDSettings(uniform=True, node_budget=budget, prompt_topk=True, pass_topk=True)
    out = generate(model, prompt, cfg, "adapld", settings=uniform)
    assert out.tokens == want
    assert made[-1].flat_rows == uniform_shape(budget) == 32
    assert max(sizes) == 32 > budget + 1  # teeth: the node budget alone caps at 25
    assert out.stats.branch_accepted > 0  # recycled successors in the free rows, accepted

    sizes.clear()
    timed.clear()
    out = generate(model, prompt, cfg, "adapld", settings=AdaPLDSettings(graphs=True))
    assert out.tokens == want and made[-1].flat_rows == 0
    firsts = made[-1].static.firsts
    assert firsts == len({bucket(n) for n in sizes}) > 1
    assert len(timed) == out.stats.forward_passes - firsts


def test_static_passes_attend_grouped_heads_without_copying_keys(monkeypatch):
    """On transformers' sdpa attention with grouped heads (GQA), static passes without key
    planes run each key head's query heads as its rows (``grouped_attention``): no
    ``repeat_kv`` copy of the keys in any static pass (the eager prefill still makes them),
    and greedy ar, adapld and a full tree through uniform passes emit the same tokens. The
    exact CPU kernels keep their own attention; a model without GQA is not grouped."""
    from transformers.integrations import sdpa_attention

    from adapld_cli.engine.graphs import attention_groups
    from tests.test_kernels import _packed

    model = _stock_bf16_model()
    assert attention_groups(model.config) == 2
    assert attention_groups(tiny_model("gpt2").config) == 0
    assert attention_groups(_packed("qwen2", torch.bfloat16).config) == 0  # exact kernels
    from adapld_cli.engine.graphs import StaticPasses

    copies, static = Counter(), [False]  # repeat_kv calls by: inside a static pass or not
    repeat, run = sdpa_attention.repeat_kv, StaticPasses._run

    def counted(states, n_rep):
        copies[static[0]] += 1
        return repeat(states, n_rep)

    def in_static(self, buf):
        static[0] = True
        try:
            return run(self, buf)
        finally:
            static[0] = False

    monkeypatch.setattr(sdpa_attention, "repeat_kv", counted)
    monkeypatch.setattr(StaticPasses, "_run", in_static)
    made = _runs(monkeypatch)
    cfg = GenerationConfig(max_new_tokens=48)
    uniform = AdaPLDSettings(uniform=True, planes=False)
    for seed in range(2):
        prompt = _copy_prompt(seed)
        want = generate(model, prompt, cfg, "ar", settings=uniform).tokens
        for settings in (uniform, replace(FULL_TREE, uniform=True, planes=False)):
            out = generate(model, prompt, cfg, "adapld", settings=settings)
            assert out.tokens == want and out.stats.accepted_draft_tokens > 0, seed
            assert made[-1].static.groups == 2 and made[-1].static_runs > 0
    assert copies[True] == 0  # no static pass copied its keys
    from adapld_cli.engine import graphs

    monkeypatch.setattr(graphs, "attention_groups", lambda config: 0)  # teeth: ungrouped
    generate(_stock_bf16_model(), _copy_prompt(0), cfg, "adapld", settings=uniform)
    assert made[-1].static.groups == 0 and copies[True] > 0


def test_cuda_passes_default_to_one_shape_with_key_planes():
    """What the loop asks of a CUDA runner by default: static passes of the one uniform shape
    with key planes, the cache preallocated for the whole answer; a CPU keeps dynamic passes
    of the bucket sizes, and ``uniform=false`` the buckets on CUDA."""
    from adapld_cli.engine.loop import _passes

    cfg = GenerationConfig(max_new_tokens=6000)
    cuda = _passes(100, cfg, AdaPLDSettings().resolve("cuda"))
    assert cuda == {"capacity": 100 + 6000 + 128, "static": True, "shapes": (80,), "planes": True,
                    "span": 512}  # fmt: skip
    cpu = _passes(100, cfg, AdaPLDSettings().resolve("cpu"))
    assert cpu == {"capacity": 100 + 4096 + 129, "static": False, "shapes": BUCKETS,
                   "planes": False, "span": 0}  # fmt: skip
    buckets = _passes(100, cfg, AdaPLDSettings(uniform=False).resolve("cuda"))
    assert buckets["static"] and buckets["shapes"] == BUCKETS and not buckets["planes"]


def test_captures_allow_cudnn_attention_unless_told_not_to(monkeypatch):
    """Inside a capture every attention backend may run, cuDNN's too, whatever the process
    flags say (eager CUDA passes run without it); ``ADAPLD_CAPTURE_CUDNN=0`` keeps the flags."""
    from adapld_cli.engine.graphs import captured_attention

    before = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(False)
    try:
        with captured_attention():
            assert torch.backends.cuda.cudnn_sdp_enabled()
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        monkeypatch.setenv("ADAPLD_CAPTURE_CUDNN", "0")
        with captured_attention():
            assert not torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)


def test_single_chain_drafts_without_branches_or_semantic(monkeypatch):
    """The GPU's cheaper exact arm (scripts/gpu/gpu_check.sh part 2: uniform passes without key
    planes) rests on this: with ``branches`` and ``semantic`` off every draft is one chain
    (each pass verifies a chain: no node outside the first-child path), on a full-tree
    drafter that branches and drafts semantically otherwise, and copied drafts are still
    accepted; greedy output equals ar's through uniform passes."""
    model = tiny_model("qwen2")
    chains: list[bool] = []
    verify = ModelRunner.verify

    def record(self, ids, parents, depths, *args, **kwargs):
        chains.append(parents is None or parents == list(range(-1, len(ids) - 1)))
        return verify(self, ids, parents, depths, *args, **kwargs)

    monkeypatch.setattr(ModelRunner, "verify", record)
    full = replace(FULL_TREE, uniform=True)
    single = replace(full, branches=False, semantic=False)
    cfg = GenerationConfig(max_new_tokens=64)
    seen = Counter()
    for seed in range(3):
        prompt = _copy_prompt(seed, model.config.vocab_size)
        chains.clear()
        out = generate(model, prompt, cfg, "adapld", settings=full)
        seen.update(trees=sum(not c for c in chains), branch=out.stats.branch_steps)
        chains.clear()
        out = generate(model, prompt, cfg, "adapld", settings=single)
        assert all(chains) and out.stats.branch_steps == out.stats.semantic_steps == 0, seed
        assert out.tokens == generate(model, prompt, cfg, "ar", settings=single).tokens, seed
        seen.update(copied=out.stats.lexical_accepted)
    assert seen["trees"] > 0 and seen["branch"] > 0  # teeth: the full tree does branch
    assert seen["copied"] > 0
