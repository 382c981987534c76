"""On-demand top-K: a prompt position's real top-K comes from its cached final hidden state
(one LM-head row), equals what a full prefill top-K would have given, survives cache
compaction, and makes real branches on CPU without changing any output."""

from __future__ import annotations

import pytest
import torch

from adapld_cli.engine import AdaPLDSettings, GenerationConfig, generate
from adapld_cli.engine.adapter import ModelRunner
from adapld_cli.engine.context import Context
from adapld_cli.engine.cost import CostModel
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
