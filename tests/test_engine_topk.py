"""On-demand top-K: a prompt position's real top-K comes from its cached final hidden state
(one LM-head row), equals what a full prefill top-K would have given, survives cache
compaction, and makes real branches on CPU without changing any output."""

from __future__ import annotations

import pytest
import torch

from adapld_cli.engine import AdaPLDSettings, GenerationConfig, generate
from adapld_cli.engine.context import Context
from adapld_cli.engine.cost import CostModel
from adapld_cli.engine.runner import ModelRunner
from tests.tiny_models import one_thread, random_prompt, tiny_model


@pytest.fixture(autouse=True)
def _single_thread():
    with one_thread():
        yield


def test_topk_at_equals_prefill_topk_and_survives_compaction():
    model = tiny_model("qwen2")
    prompt = random_prompt(5)
    runner = ModelRunner(model, hidden_layer=None, want_hidden=False, keep_final=True)
    _, topk = runner.prefill(prompt, top_k=4, chunk=16)
    n = len(prompt)
    assert torch.equal(runner.topk_at(list(range(n)), 4), topk)
    # a tree pass: root + two siblings; keep the second sibling (non-contiguous compaction)
    from adapld_cli.engine.tree import tree_mask

    out = runner.step([3, 7, 9], [0, 1, 1], tree_mask([-1, 0, 0], n, runner.dtype, "cpu"))
    expect = out.logits.rows([0, 2]).topk(4, dim=-1).indices
    runner.keep(n, [0, 2])
    assert runner.cache_len == n + 2
    assert torch.equal(runner.topk_at([n, n + 1], 4), expect)
    assert torch.equal(runner.topk_at([0, n - 1], 4), topk[[0, n - 1]])


def test_context_looks_up_missing_rows_once():
    model = tiny_model("llama")
    prompt = random_prompt(2)
    runner = ModelRunner(model, hidden_layer=None, want_hidden=False, keep_final=True)
    runner.prefill(prompt[:-1], 0)
    ctx = Context(prompt, len(prompt) + 8, 0, 3, "cpu", CostModel("cpu"))
    ctx.observed_topk(len(prompt) - 1)
    assert ctx.topk_rows([4], compute=True) == [[prompt[5]]]  # no predictor: observed
    ctx.attach(runner)
    assert ctx.can_lookup([4]) and ctx.lookup_ratio() > 0
    assert ctx.topk_rows([4], compute=False) == [[prompt[5]]]
    rows = ctx.topk_rows([4, 9], compute=True)
    assert rows == runner.topk_at([4, 9], 3).tolist() and ctx.lookups == 1
    timed = ctx.lookup_s  # the one lookup's measured seconds
    assert not ctx.can_lookup([4, 9]) and ctx.topk_rows([9, 4]) == rows[::-1]
    assert ctx.lookups == 1 and ctx.lookup_s == timed  # cached rows: no second lookup


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_lookups_make_branches_and_stay_lossless(arch):
    model = tiny_model(arch)
    settings = AdaPLDSettings(
        adaptive=False, semantic=True, sim_floor=-1.0, top_k=4, topk_lookup=True
    )
    branch_steps = without = branch_accepted = 0
    never = AdaPLDSettings(
        adaptive=False, semantic=True, sim_floor=-1.0, top_k=4, topk_lookup=False
    )
    for seed in range(6):
        prompt = random_prompt(seed, repeats=seed % 3 != 2)
        cfg = GenerationConfig(max_new_tokens=40)
        ref = generate(model, prompt, cfg, "ar").tokens
        out = generate(model, prompt, cfg, "adapld", settings=settings)
        assert out.tokens == ref
        branch_steps += out.stats.branch_steps
        branch_accepted += out.stats.branch_accepted
        plain = generate(model, prompt, cfg, "adapld", settings=never)
        assert plain.tokens == ref
        without += plain.stats.branch_steps
    assert branch_steps > without  # prompt copy sources now have alternatives
    assert branch_accepted > 0  # ... and some of them won, identical to plain decoding


@pytest.mark.parametrize("vocab", [151_936, 1_000, 128 * 9 + 1, 300])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_topk_ids_are_the_k_largest(vocab, dtype):
    """The blockwise top-K gives torch's top-K values, largest first, at distinct valid ids:
    a vocabulary with a tail block, ties (bfloat16 has many), and the largest entries all in
    one block or at the very end."""
    from adapld_cli.engine.logits import topk_ids

    gen = torch.Generator().manual_seed(vocab)
    x = torch.randn(7, vocab, generator=gen).to(dtype)
    x[1, 5:9] = 50.0  # four equal maxima in one block
    x[2, -3:] = torch.tensor([40.0, 41.0, 42.0]).to(dtype)  # in the tail
    x[3] = 1.0  # all equal
    x[4, 0] = float("-inf")
    for k in (1, 3, 4):
        ids = topk_ids(x, k)
        assert ids.shape == (7, k) and ids.dtype == torch.long
        assert int(ids.min()) >= 0 and int(ids.max()) < vocab
        assert all(len(set(row)) == k for row in ids.tolist())
        assert torch.equal(x.gather(1, ids), x.topk(k, dim=-1).values)
    assert topk_ids(x, 3)[2].tolist() == [vocab - 1, vocab - 2, vocab - 3]
    many = x.repeat(20, 1)  # 140 rows: taken 64 at a time
    assert torch.equal(many.gather(1, topk_ids(many, 3)), many.topk(3, dim=-1).values)


def test_pass_topk_equals_rows_topk():
    """``LazyLogits.topk`` (what the loop records for accepted rows) has the values of the
    node logits' own top-K."""
    model = tiny_model("qwen2")
    prompt = random_prompt(3)
    runner = ModelRunner(model, hidden_layer=None, want_hidden=False)
    runner.prefill(prompt, 0)
    out = runner.step([3, 7, 9, 11], None, None)
    rows = out.logits.rows([0, 2, 3]).float()
    ids = torch.tensor(out.logits.topk([0, 2, 3], 4))
    assert torch.equal(rows.gather(1, ids), rows.topk(4, dim=-1).values)
    # read with the argmax (``topk=4``): the same rows, and the argmax is the first entry
    runner.keep(len(prompt), [])
    both = runner.step([3, 7, 9, 11], None, None, topk=4).logits
    assert [both.argmax(i) for i in range(4)] == out.logits.rows(range(4)).argmax(-1).tolist()
    assert both._topk and both.topk([0, 2, 3], 4) == ids.tolist()
    assert [row[0] for row in both.topk([0, 1, 2, 3], 4)] == [both.argmax(i) for i in range(4)]


def test_pass_rows_topk_only_where_asked(monkeypatch):
    """On a CPU the accepted rows' top-K is not computed by default (the token that followed
    stands in, real rows come from lookups); ``pass_topk=True`` computes it every pass. The
    output is plain decoding's either way."""
    from adapld_cli.engine.logits import LazyLogits

    calls = []
    real = LazyLogits.topk

    def counted(self, idx, k):
        calls.append(k)
        return real(self, idx, k)

    monkeypatch.setattr(LazyLogits, "topk", counted)
    model = tiny_model("llama")
    prompt = random_prompt(4)
    cfg = GenerationConfig(max_new_tokens=40)
    ref = generate(model, prompt, cfg, "ar").tokens
    lazy = generate(model, prompt, cfg, "adapld", settings=AdaPLDSettings(adaptive=False))
    assert lazy.tokens == ref and lazy.stats.accepted_draft_tokens > 0 and calls == []
    eager = AdaPLDSettings(adaptive=False, pass_topk=True)
    out = generate(model, prompt, cfg, "adapld", settings=eager)
    assert out.tokens == ref and calls and set(calls) == {eager.resolve("cpu").top_k}
    assert len(calls) == out.stats.forward_passes


def test_observed_rows_of_a_span():
    ctx = Context([5, 6, 7, 8, 9, 10], 8, 0, 3, "cpu", CostModel("cpu"))
    ctx.record(0, None, torch.tensor([[1, 2, 3]] * 5))
    ctx.observed_topk(4, start=2)
    assert ctx.topk_rows([0, 1, 2, 3, 4]) == [[1, 2, 3], [1, 2, 3], [8], [9], [1, 2, 3]]
    assert not ctx.can_lookup([0, 1, 4]) and ctx.known[2:4] == bytes(2)
