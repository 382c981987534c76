"""Prepacked, batch-invariant CPU kernels (adapld_cli.model.kernels) on tiny Qwen2, Llama,
Qwen3 and GPT-2 models: a draft tree's rows (up to the widest pass the engine makes) equal
sequential single-token rows bit for bit in float32 and bfloat16, so greedy AdaPLD is exactly
plain decoding; fallbacks and modes."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
import torch

from adapld_cli.engine import AdaPLDSettings, GenerationConfig, generate
from adapld_cli.engine.runner import ModelRunner
from adapld_cli.engine.tree import tree_mask
from adapld_cli.model import kernels, lean
from tests.tiny_models import one_thread, random_prompt, tiny_model

DTYPES = [torch.float32, torch.bfloat16]
# what the exactness tests run on: dense weights in each dtype, and bfloat16 activations on
# 4-bit (Q4_K-style), 6-bit (Q6_K-style) and 8-bit (Q8_0-style) weights with the quantized
# kernels (adapld_cli.model.quant)
WEIGHTS = [(torch.float32, None), (torch.bfloat16, None), (torch.bfloat16, "q4"),
           (torch.bfloat16, "q6"), (torch.bfloat16, "q8")]  # fmt: skip
WEIGHT_IDS = ["float32", "bfloat16", "q4", "q6", "q8"]
ARCHS = ["qwen2", "llama", "qwen3", "gemma3", "gpt2"]
# a 10-node chain from the root, a 5-node branch under node 3, a 2-node branch at the root
PARENTS = [-1, *range(9), 3, 10, 11, 12, 13, 0, 15]
# the widest pass the engine makes: the root plus the default node budget
WIDEST = AdaPLDSettings().node_budget + 1


def dfs_tree(n: int, seed: int, chain: int = 40) -> list[int]:
    """Parents of an ``n``-node draft tree in depth-first order, as the drafter builds them:
    a ``chain``-node copied chain from the root, the other nodes hung under random earlier
    nodes (branches of every depth), renumbered so each subtree is contiguous."""
    rng = random.Random(seed)
    parents = [-1] + [i - 1 if i <= chain else rng.randrange(i) for i in range(1, n)]
    children: list[list[int]] = [[] for _ in range(n)]
    for i, p in enumerate(parents[1:], 1):
        children[p].append(i)
    order, todo = [], [0]
    while todo:
        node = todo.pop()
        order.append(node)
        todo.extend(reversed(children[node]))
    new = {old: i for i, old in enumerate(order)}
    return [-1 if parents[old] < 0 else new[parents[old]] for old in order]


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.delenv(kernels.ENV_KERNELS, raising=False)
    with one_thread():
        yield


def tree_pass(runner: ModelRunner, tokens: list[int], parents: list[int]) -> torch.Tensor:
    """One draft-tree pass over ``tokens`` after the runner's cache (``parents`` in depth-first
    order): every node's logits, ``[len(tokens), vocab]``."""
    depths: list[int] = []
    for p in parents:
        depths.append(0 if p < 0 else depths[p] + 1)
    mask = tree_mask(parents, runner.cache_len, runner.dtype, runner.device)
    return runner.step(tokens, depths, mask).logits.rows(list(range(len(tokens))))


def tree_vs_sequential(model, prefix: list[int], tokens: list[int], parents: list[int]):
    """Logits of one tree pass over ``tokens`` (after ``prefix``) vs each node's logits from
    plain decoding of its root path, one token per pass (each node fed once: the cache is
    rolled back to the branch point; ``parents`` in depth-first order, as the drafter builds
    trees). Returns ``(rows bitwise equal, max |diff|)``."""
    runner = ModelRunner(model, hidden_layer=None, want_hidden=False)
    runner.prefill(prefix, 0)
    past = runner.cache_len
    batch = tree_pass(runner, tokens, parents)
    runner.keep(past, [])
    fed: list[int] = []  # nodes whose tokens are in the cache after the prefix, root first
    equal, worst = 0, 0.0
    for i in range(len(tokens)):
        while fed and fed[-1] != parents[i]:  # parents precede children: roll back
            fed.pop()
        runner.keep(past, list(range(len(fed))))
        row = runner.step([tokens[i]], None, None).logits.row(0)
        fed.append(i)
        equal += int(torch.equal(row, batch[i]))
        worst = max(worst, (row.float() - batch[i].float()).abs().max().item())
    return equal, worst


def _packed(arch: str, dtype: torch.dtype, mode: str = "exact", quantized=None, **kw):
    model = tiny_model(arch, dtype="float32", **kw).to(dtype)
    if quantized:
        from adapld_cli.model import quant

        assert quant.unavailable() is None, quant.unavailable()  # fail, never skip
        linears = 9 if arch == "gpt2" else 22
        assert quant.quantize_model(model, quantized) == linears  # every linear, LM head too
    assert kernels.apply(model, mode) == mode
    lean.install(model)  # as the loader does: the exactness tests run the forward users get
    return model


@pytest.mark.parametrize("tree", ["17-node", "widest"])
@pytest.mark.parametrize(("dtype", "quantized"), WEIGHTS, ids=WEIGHT_IDS)
@pytest.mark.parametrize("arch", ARCHS)
def test_tree_rows_bitwise_equal_sequential_rows(arch, dtype, quantized, tree):
    parents = PARENTS if tree == "17-node" else dfs_tree(WIDEST, seed=0)
    gen = torch.Generator().manual_seed(1)
    prefix = torch.randint(0, 48, (70,), generator=gen).tolist()
    tokens = torch.randint(0, 48, (len(parents),), generator=gen).tolist()
    model = _packed(arch, dtype, quantized=quantized)
    assert tree_vs_sequential(model, prefix, tokens, parents) == (len(parents), 0.0)


@pytest.mark.parametrize(("dtype", "quantized"), WEIGHTS, ids=WEIGHT_IDS)
@pytest.mark.parametrize("arch", ARCHS)
def test_prefill_writes_the_cache_rows_of_single_steps(arch, dtype, quantized):
    """A prompt prefilled in the runner's default chunks (the widest exact pass, so several
    chunks here) leaves bit for bit the cache rows that feeding it one token a pass writes."""
    model = _packed(arch, dtype, quantized=quantized)
    prompt = torch.randint(0, 48, (300,), generator=torch.Generator().manual_seed(2)).tolist()
    chunked = ModelRunner(model, hidden_layer=None, want_hidden=False)
    assert chunked.prefill_chunk() == kernels.EXACT_MAX_QUERIES < len(prompt)
    chunked.prefill(prompt, 0)
    stepped = ModelRunner(model, hidden_layer=None, want_hidden=False)
    for token in prompt:
        stepped.step([token], None, None)
    for a, b in zip(chunked.cache.layers, stepped.cache.layers, strict=True):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)


def _amx() -> bool:
    """Whether this CPU has AMX tiles (its flags as Linux lists them)."""
    try:
        return "amx_tile" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_packed_linear_close_to_linear_and_batch_invariant(dtype):
    """Every row count up to the longest exact pass (beyond the widest draft tree) gives each
    row bit for bit what it gets alone, for 1- and 3-chunk reductions."""
    from transformers.pytorch_utils import Conv1D

    torch.manual_seed(0)
    rows = kernels.EXACT_MAX_QUERIES
    assert rows >= WIDEST
    for k, n, bias in ((64, 40, True), (2500, 96, True), (2100, 80, False)):  # 1, 3, 3 chunks
        linear = torch.nn.Linear(k, n, bias=bias).to(dtype)
        packed = kernels.packed_linear_class()(linear)
        assert len(packed.chunks) == -(-k // kernels.K_CHUNK)
        x = torch.randn(rows, k).to(dtype)
        with torch.inference_mode():
            ref = linear(x).float()
            out = packed(x)
            alone = torch.cat([packed(x[i : i + 1]) for i in range(rows)])
            for m in range(1, rows + 1):
                assert torch.equal(packed(x[:m]), alone[:m]), (k, m)
        tol = 1e-4 if dtype == torch.float32 else 3e-2
        assert out.dtype == dtype and out.shape == (rows, n)
        assert torch.allclose(out.float(), ref, atol=tol * ref.abs().max().item(), rtol=0)
        assert packed(x[None]).shape == (1, rows, n)  # leading dims kept
    # the row blocks AMX CPUs take, on any CPU: blocks joined in order, longer passes whole
    packed = kernels.packed_linear_class()(torch.nn.Linear(2500, 96).to(dtype))
    x = torch.randn(rows + 8, 2500).to(dtype)
    with torch.inference_mode():
        whole = packed(x)  # longer than an exact pass: one product
        packed.rows = kernels.AMX_ROW_BLOCK
        assert torch.equal(packed(x), whole)
        assert torch.equal(packed(x[:rows]), torch.cat([packed(x[i : i + 1]) for i in range(rows)]))
    expected = kernels.AMX_ROW_BLOCK if dtype == torch.bfloat16 and _amx() else 0
    assert kernels.row_block(packed.compute) == expected
    conv = Conv1D(40, 64).to(dtype)  # GPT-2's linear layer, weight stored [in, out]
    packed = kernels.packed_linear_class()(conv)
    x = torch.randn(rows, 64).to(dtype)
    with torch.inference_mode():
        ref, out = conv(x).float(), packed(x)
        alone = torch.cat([packed(x[i : i + 1]) for i in range(rows)])
    assert torch.equal(out, alone)
    assert torch.allclose(out.float(), ref, atol=tol * ref.abs().max().item(), rtol=0)


def test_query_plan_of_masks():
    assert kernels.query_plan(None, 3, 10) == [8, 9, 10]
    parents = [-1, 0, 1, 0, 3]  # chain 0-1-2, branch 3-4 under the root
    plan = kernels.query_plan(tree_mask(parents, 5, torch.float32, "cpu"), 5, 10)
    assert plan[:3] == [6, 7, 8]
    assert plan[3].tolist() == [0, 1, 2, 3, 4, 5, 8]
    assert plan[4].tolist() == [0, 1, 2, 3, 4, 5, 8, 9]
    causal_bool = torch.ones(4, 6, dtype=torch.bool).tril(2)[None, None]
    assert kernels.query_plan(causal_bool, 4, 6) == [3, 4, 5, 6]
    soft = torch.zeros(1, 1, 2, 4)
    soft[..., 1] = -3.0  # a bias, not a mask: left to sdpa
    assert kernels.query_plan(soft, 2, 4) is None


def test_window_plans_keep_each_querys_last_keys():
    """A sliding window keeps the last ``window`` keys of each query's sequence; the native
    form slices the cache where the kept keys start, whatever form the plan had: a step over
    the whole cache and a step whose mask already dropped the keys before the window (as
    transformers makes it for a sliding layer) come to one plan."""
    plan = kernels.query_plan(tree_mask([-1, 0, 0], 6, torch.float32, "cpu"), 3, 9)
    windowed = kernels.window_plan(plan, 4)
    assert windowed[0].tolist() == [3, 4, 5, 6]
    assert windowed[2].tolist() == [4, 5, 6, 8]  # its parent, then itself
    assert kernels.window_plan([3], 4) == [3]  # shorter than the window: as it was
    whole = (torch.tensor([110]), torch.tensor([0, 0]), torch.zeros(0, dtype=torch.long))
    masked = (torch.tensor([0]), torch.tensor([0, 50]), torch.arange(60, 110))
    ((rows, start, prefix, ptr, extra),) = kernels.window_groups(whole, 50)
    assert (rows.tolist(), start, prefix.tolist(), ptr.tolist(), extra.tolist()) == (
        [0],
        60,
        [50],
        [0, 0],
        [],
    )
    (same,) = kernels.window_groups(masked, 50)
    assert same[1] == 60 and same[2].tolist() == [50] and same[4].tolist() == []
    # a tree pass: queries at two depths slice at two rows; ancestors stay extras
    tree = (torch.tensor([100, 100]), torch.tensor([0, 1, 3]), torch.tensor([100, 100, 102]))
    groups = {g[1]: g for g in kernels.window_groups(tree, 50)}
    assert sorted(groups) == [51, 52]
    assert groups[51][0].tolist() == [0] and groups[51][2].tolist() == [49]
    assert groups[51][4].tolist() == [49]
    assert groups[52][0].tolist() == [1] and groups[52][4].tolist() == [48, 50]


def test_apply_modes_and_fallbacks(monkeypatch):
    double = tiny_model("qwen2")  # float64: left alone
    assert kernels.supported(double) is not None
    assert kernels.apply(double) == "stock"
    assert isinstance(double.lm_head, torch.nn.Linear)

    monkeypatch.setenv(kernels.ENV_KERNELS, "stock")
    model = tiny_model("qwen2", dtype="float32")
    assert kernels.apply(model) == "stock" and isinstance(model.lm_head, torch.nn.Linear)
    monkeypatch.setenv(kernels.ENV_KERNELS, "packed")
    model = tiny_model("qwen2", dtype="float32")
    assert kernels.apply(model) == "packed"
    assert model.config._attn_implementation != kernels.ATTENTION
    assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())
    monkeypatch.setenv(kernels.ENV_KERNELS, "nonsense")
    with pytest.raises(ValueError, match=kernels.ENV_KERNELS):
        kernels.resolve_mode()
    monkeypatch.delenv(kernels.ENV_KERNELS)
    model = tiny_model("qwen2", dtype="float32")
    assert kernels.apply(model) == "exact" and kernels.apply(model) == "exact"  # idempotent
    assert model.config._attn_implementation == kernels.ATTENTION


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_tied_embeddings_keep_working(dtype):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=48, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
    )  # fmt: skip
    stock = Qwen2ForCausalLM(cfg).to(dtype).eval()
    assert stock.lm_head.weight is stock.model.embed_tokens.weight
    model = Qwen2ForCausalLM(cfg).to(dtype).eval()
    model.load_state_dict(stock.state_dict())
    kernels.apply(model)
    ids = torch.tensor([random_prompt(0)[:30]])
    with torch.inference_mode():
        ref, out = stock(ids).logits.float(), model(ids).logits.float()
    tol = 1e-4 if dtype == torch.float32 else 0.1
    assert torch.allclose(out, ref, atol=tol * ref.abs().max().item(), rtol=0)
    assert torch.equal(model.model.embed_tokens.weight, stock.model.embed_tokens.weight)


@pytest.mark.parametrize(("dtype", "quantized"), WEIGHTS, ids=WEIGHT_IDS)
@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_adapld_is_plain_decoding_in_any_dtype(arch, dtype, quantized):
    """With the exact kernels on, greedy AdaPLD in float32, bfloat16 and on 4/6-bit weights
    emits plain decoding's tokens, through full trees of the default budget (passes up to
    WIDEST rows) whose copied, branch and semantic drafts were all accepted somewhere."""
    model = _packed(arch, dtype, quantized=quantized)
    full = AdaPLDSettings(adaptive=False, semantic=True, sim_floor=-1.0, topk_lookup=True)
    accepted: Counter = Counter()
    for seed in range(6):
        prompt = random_prompt(seed)
        cfg = GenerationConfig(max_new_tokens=40)
        ref = generate(model, prompt, cfg, "ar").tokens
        assert generate(model, prompt, cfg, "adapld").tokens == ref, seed
        out = generate(model, prompt, cfg, "adapld", settings=full)
        assert out.tokens == ref, seed
        s = out.stats
        accepted.update(
            lexical=s.lexical_accepted, branch=s.branch_accepted, semantic=s.semantic_accepted
        )
    assert min(accepted["lexical"], accepted["branch"], accepted["semantic"]) > 0, accepted


@pytest.mark.parametrize("native", [True, False], ids=["native", "torch"])
def test_sliding_window_layers_attend_only_their_window(native, monkeypatch):
    """Gemma 3's sliding-window layers on the exact attention (the engine's caches keep every
    position; the window is the attention's: kernels.window_plan): single decoding steps and
    a draft tree's nodes past the window get what transformers' own model computes with its
    sliding-window masks, and the window matters (attending every key differs)."""
    from tests.tiny_models import WINDOW

    if not native:
        monkeypatch.setattr(kernels, "_NATIVE", False)
    model = _packed("gemma3", torch.float32)
    stock = tiny_model("gemma3", dtype="float32")
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 48, (3 * WINDOW,), generator=gen).tolist()
    with torch.no_grad():  # its sliding-window mask on the sliding layers
        want = stock(torch.tensor([ids])).logits[0]  # [L, vocab]
    runner = ModelRunner(model, hidden_layer=None, want_hidden=False)
    runner.prefill(ids[:WINDOW], 0)
    steps = [runner.step([t], None, None).logits.row(0) for t in ids[WINDOW:]]
    got = torch.stack(steps)  # positions WINDOW .. 3 WINDOW - 1
    assert torch.allclose(got, want[WINDOW:], atol=1e-5, rtol=1e-4)
    # a chain of draft nodes past the window, in one tree pass
    runner = ModelRunner(model, hidden_layer=None, want_hidden=False)
    runner.prefill(ids[: 2 * WINDOW], 0)
    chain = list(range(-1, WINDOW - 1))
    tree = tree_pass(runner, ids[2 * WINDOW :], chain)
    assert torch.allclose(tree, want[2 * WINDOW :], atol=1e-5, rtol=1e-4)
    # without the window, the same steps differ
    monkeypatch.setattr(stock.config, "sliding_window", 10**6)
    for layer in stock.model.layers:
        layer.self_attn.sliding_window = None
    with torch.no_grad():
        full = stock(torch.tensor([ids])).logits[0]
    assert not torch.allclose(full[WINDOW:], want[WINDOW:], atol=1e-3)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_native_attention_runs_and_matches_the_torch_path(dtype, monkeypatch):
    """The exact attention runs the native kernel (qmm.cpp) wherever it builds; its tree rows
    are single steps bit for bit (the tests above), and it computes what the per-query torch
    ops compute, up to float32 rounding. With the native kernel ruled out, the torch path is
    exact too."""
    from adapld_cli.model import quant

    if quant.target() is not None:
        assert kernels._native_attention() is not None, quant.unavailable()
    model = _packed("qwen2", dtype)
    gen = torch.Generator().manual_seed(4)
    prefix = torch.randint(0, 48, (90,), generator=gen).tolist()
    parents = dfs_tree(WIDEST, seed=2)
    tokens = torch.randint(0, 48, (len(parents),), generator=gen).tolist()

    def tree_logits():
        runner = ModelRunner(model, hidden_layer=None, want_hidden=False)
        runner.prefill(prefix, 0)
        return tree_pass(runner, tokens, parents).float()

    native = tree_logits()
    monkeypatch.setattr(kernels, "_NATIVE", False)
    torch_ops = tree_logits()
    tol = 1e-5 if dtype == torch.float32 else 0.1
    assert (native - torch_ops).abs().max() <= tol * torch_ops.abs().max()
    assert tree_vs_sequential(model, prefix, tokens, parents) == (len(parents), 0.0)


def on_tiles(ext, dtype, d: int, groups: int) -> bool:
    """Whether the native attention of this call runs on AMX tiles (attn_amx.h decides: a
    bfloat16 cache, its head sizes and heads per kv head, an AMX build)."""
    return dtype == torch.bfloat16 and ext.attention_tiles(d, groups)


def assert_generic_form(ext, out, q, k, v, plan, dtype) -> None:
    """``out`` is the generic loop's result bit for bit, or, where the tiles compute it (their
    own summation order, the same in every pass of a process), within the rounding of its
    scores (which can move a probability's bfloat16 rounding by one step) of it."""
    want = ext.attention(q, k, v, *plan, generic=True)
    if on_tiles(ext, dtype, q.shape[-1], q.shape[1] // k.shape[0]):
        assert not torch.equal(out, want) or out.numel() < 4096  # the tiles did run
        assert (out - want).abs().max() <= 4e-3 * want.abs().max()
    else:
        assert torch.equal(out, want)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    ("d", "heads"), [(128, 12), (64, 14), (128, 16), (64, 2), (128, 4), (64, 18)]
)
def test_native_attention_register_form_is_the_generic_one(dtype, d, heads):
    """For head sizes 64 and 128 the native attention keeps keys and sums in registers, with
    scores reduced 16 keys at a time and values summed for up to six heads at once: it must
    give the generic loop's results bit for bit (1 to 9 heads per kv head, key counts that are
    no multiple of 16; on AMX tiles, within rounding: assert_generic_form), and each query
    alone what it gets in a draft-tree pass (the property exactness needs), on a tree with
    branches."""
    from adapld_cli.model import quant

    if quant.unavailable():
        pytest.skip(quant.unavailable())
    ext = quant.extension()
    gen = torch.Generator().manual_seed(d)
    parents = dfs_tree(33, seed=d, chain=20)
    n, cached, kv = len(parents), 300, 2
    s = cached + n
    q = torch.randn(n, heads, d, generator=gen) * 0.2
    k = torch.randn(kv, s, d, generator=gen).to(dtype)
    v = torch.randn(kv, s, d, generator=gen).to(dtype)
    plan = kernels.native_plan(tree_mask(parents, cached, torch.float32, "cpu"), n, s)
    fast = ext.attention(q, k, v, *plan)
    assert_generic_form(ext, fast, q, k, v, plan, dtype)
    prefix, ptr, extra = plan
    for i in range(n):
        mine = torch.tensor([0, ptr[i + 1] - ptr[i]])
        one = ext.attention(q[i : i + 1], k, v, prefix[i : i + 1], mine, extra[ptr[i] : ptr[i + 1]])
        assert torch.equal(one[0], fast[i]), i


@pytest.mark.parametrize(("d", "heads", "keys"), [(128, 12, 301), (64, 14, 64), (96, 4, 17)])
def test_native_bfloat16_attention_is_attention(d, heads, keys):
    """Over a bfloat16 cache the kernel rounds the queries and the probabilities to bfloat16
    and sums pair products: its result must still be softmax(q k^T) v of the same values,
    within bfloat16's rounding, in both forms (a wrongly paired key or position would be off
    by the size of the values), for an even and an odd number of keys per query."""
    from adapld_cli.model import quant

    if quant.unavailable():
        pytest.skip(quant.unavailable())
    ext = quant.extension()
    gen = torch.Generator().manual_seed(keys)
    n, kv = 5, 2
    q = torch.randn(n, heads, d, generator=gen) * 0.3
    k = torch.randn(kv, keys, d, generator=gen).bfloat16()
    v = torch.randn(kv, keys, d, generator=gen).bfloat16()
    prefix = torch.tensor([keys - 4, keys - 3, keys - 2, keys - 1, keys])  # odd and even counts
    ptr, extra = torch.zeros(n + 1, dtype=torch.int64), torch.zeros(0, dtype=torch.int64)
    g = heads // kv
    for generic in (False, True):
        out = ext.attention(q, k, v, prefix, ptr, extra, generic=generic)
        for i in range(n):
            kk = k[:, : prefix[i]].float().repeat_interleave(g, 0)  # [H, L, d]
            vv = v[:, : prefix[i]].float().repeat_interleave(g, 0)
            want = torch.einsum("hl,hld->hd", torch.einsum("hd,hld->hl", q[i], kk).softmax(-1), vv)
            assert (out[i] - want).abs().max() < 0.03, (generic, i)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_native_attention_reads_a_preallocated_cache_in_place(dtype):
    """Keys and values given as a view of a larger preallocated buffer (the growing cache:
    heads ``capacity`` rows apart) give exactly what contiguous copies give."""
    from adapld_cli.model import quant

    if quant.unavailable():
        pytest.skip(quant.unavailable())
    ext = quant.extension()
    gen = torch.Generator().manual_seed(7)
    parents = dfs_tree(21, seed=7, chain=12)
    n, cached, kv, heads, d = len(parents), 203, 2, 12, 128
    s = cached + n
    buf = torch.randn(2, kv, s + 77, d, generator=gen).to(dtype)
    k, v = buf[0, :, :s], buf[1, :, :s]
    assert not k.is_contiguous()
    q = torch.randn(n, heads, d, generator=gen) * 0.2
    plan = kernels.native_plan(tree_mask(parents, cached, torch.float32, "cpu"), n, s)
    keys, values = kernels._head_rows(k, v)
    assert keys.data_ptr() == k.data_ptr()  # used in place, not copied
    copies = ext.attention(q, k.contiguous(), v.contiguous(), *plan)
    assert torch.equal(ext.attention(q, keys, values, *plan), copies)


def test_bfloat16_linears_compute_where_onednn_can():
    """Packed bfloat16 linears run oneDNN's bfloat16 kernels where the CPU has them and
    float32 ones elsewhere (AVX2), with bfloat16 outputs either way; the exactness tests
    above run whichever this CPU takes."""
    model = _packed("qwen2", torch.bfloat16)
    native = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    packed = [m for m in model.modules() if isinstance(m, kernels.packed_linear_class())]
    assert packed and all(
        m.compute == (torch.bfloat16 if native else torch.float32) for m in packed
    )
    x = torch.randn(3, packed[0].in_features).to(torch.bfloat16)
    assert packed[0](x).dtype == torch.bfloat16
