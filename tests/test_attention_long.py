"""Exact attention over long caches (past 4k keys): the native kernel's result for a query
must not depend on which other queries share its pass or which thread runs it: each row of a
pass of 1 to 128 queries (a chain, whose queries attend prefixes of different lengths, and a
draft tree, whose branches attend extra rows), with the work split between two threads,
equals the row computed alone bit for bit, and the generic loop's (bit for bit, or within
rounding where AMX tiles compute it); a tiny model's tree rows
equal plain decoding's after a 4,500-token prompt, and so do the embedded model's (slow:
marked real)."""

from __future__ import annotations

import pytest
import torch

from adapld_cli.engine.tree import tree_mask
from adapld_cli.model import kernels
from tests.test_kernels import (
    WIDEST,
    _packed,
    assert_generic_form,
    dfs_tree,
    tree_vs_sequential,
)

DTYPES = [torch.float32, torch.bfloat16]
ROWS = (1, 2, 7, 8, 9, 16, 31, 64, 100, 128)


def _extension():
    from adapld_cli.model import quant

    assert quant.unavailable() is None, quant.unavailable()  # fail where it should build
    return quant.extension()


def _plan(n: int, cached: int, tree: bool, seed: int):
    """The kernel's plan for ``n`` queries after ``cached`` keys: a chain (mask None) or a
    depth-first draft tree."""
    s = cached + n
    if not tree:
        return kernels.native_plan(None, n, s)
    parents = dfs_tree(n, seed=seed, chain=min(n, 20))
    return kernels.native_plan(tree_mask(parents, cached, torch.float32, "cpu"), n, s)


def _alone(ext, q, k, v, plan, i):
    """Query ``i`` of ``plan`` in a pass of its own."""
    prefix, ptr, extra = plan
    mine = torch.tensor([0, int(ptr[i + 1] - ptr[i])])
    return ext.attention(q[i : i + 1], k, v, prefix[i : i + 1], mine, extra[ptr[i] : ptr[i + 1]])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("cached", "d", "heads"), [(4100, 128, 12), (9000, 64, 14), (300, 128, 4)])
def test_long_cache_rows_do_not_depend_on_the_pass(dtype, cached, d, heads):
    ext = _extension()
    gen = torch.Generator().manual_seed(cached)
    kv, widest = 2, max(ROWS)
    k = torch.randn(kv, cached + widest, d, generator=gen).to(dtype)
    v = torch.randn(kv, cached + widest, d, generator=gen).to(dtype)
    q = torch.randn(widest, heads, d, generator=gen) * 0.2
    old = torch.get_num_threads()
    torch.set_num_threads(2)  # work items split between threads, as users run it
    try:
        for n in ROWS:
            s = cached + n
            for tree in (False, True):
                plan = _plan(n, cached, tree, seed=n)
                qn, kn, vn = q[:n].contiguous(), k[:, :s], v[:, :s]
                out = ext.attention(qn, kn, vn, *plan)
                if n in (9, widest):
                    assert_generic_form(ext, out, qn, kn, vn, plan, dtype)
                rows = range(n) if n <= 16 else sorted({0, 7, 8, n // 2, n - 2, n - 1})
                for i in rows:
                    assert torch.equal(_alone(ext, qn, kn, vn, plan, i)[0], out[i]), (n, tree, i)
    finally:
        torch.set_num_threads(old)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_tiny_model_tree_rows_are_plain_decoding_after_a_long_prompt(dtype):
    """Past 4k cached positions (the cache grown by doubling on the way), each row of the
    widest draft tree equals plain decoding of its root path, bit for bit."""
    model = _packed("qwen2", dtype, positions=8192)
    gen = torch.Generator().manual_seed(5)
    prefix = torch.randint(0, 48, (4500,), generator=gen).tolist()
    parents = dfs_tree(WIDEST, seed=3)
    tokens = torch.randint(0, 48, (len(parents),), generator=gen).tolist()
    assert tree_vs_sequential(model, prefix, tokens, parents) == (len(parents), 0.0)


@pytest.mark.real
def test_embedded_model_tree_rows_are_plain_decoding_after_a_long_prompt(embedded):
    """The embedded model, as loaded, after a 4,200-token prompt: each row of the widest
    draft tree equals plain decoding bit for bit."""
    from tests.test_engine_real import require_exact_kernels

    model = embedded.model
    require_exact_kernels(model)
    gen = torch.Generator().manual_seed(7)
    prefix = torch.randint(0, 20000, (4200,), generator=gen).tolist()
    parents = dfs_tree(WIDEST, seed=1)
    tokens = torch.randint(0, 20000, (len(parents),), generator=gen).tolist()
    assert tree_vs_sequential(model, prefix, tokens, parents) == (len(parents), 0.0)
