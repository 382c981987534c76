"""The lean forward (adapld_cli.model.lean) computes what transformers' forward computes, bit
for bit: prefill chunks, chains, draft trees and single steps of tiny Qwen2, Qwen3 and Llama models,
dense and quantized (fused projections), logits, hooked hidden states and the cache; it is
really the path taken; it stays out of what it does not know."""

from __future__ import annotations

import random

import pytest
import torch

from adapld_cli.engine.runner import ModelRunner
from adapld_cli.engine.tree import tree_mask
from adapld_cli.model import kernels, lean, quant
from tests.tiny_models import VOCAB, one_thread, tiny_model

# dense weights in each dtype; 4- and 6-bit weights with int8 and bfloat16 activations
WEIGHTS = [
    (torch.float32, None, None),
    (torch.bfloat16, None, None),
    (torch.bfloat16, "q4", "int8"),
    (torch.bfloat16, "q4", "bfloat16"),
    (torch.bfloat16, "q6", "int8"),
    (torch.bfloat16, "q6", "bfloat16"),
    (torch.bfloat16, "q4_k_m", "int8"),
    (torch.bfloat16, "q8", "int8"),
]
IDS = ["float32", "bfloat16", "q4-int8", "q4-bf16", "q6-int8", "q6-bf16", "q4_k_m-int8", "q8-int8"]
PARENTS = [-1, 0, 1, 2, 1, 4, 0, 6, 7]  # a chain with two branches


def _prompt(seed: int, length: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(VOCAB) for _ in range(length)]


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.delenv(kernels.ENV_KERNELS, raising=False)
    monkeypatch.delenv(lean.ENV_LEAN, raising=False)
    with one_thread():
        yield


def _model(arch, dtype, kind, activations, monkeypatch, on: bool):
    monkeypatch.setenv(lean.ENV_LEAN, "1" if on else "0")
    if activations:
        monkeypatch.setenv(quant.ENV_ACTIVATIONS, activations)
    model = tiny_model(arch, dtype="float32").to(dtype)
    if kind:
        assert quant.unavailable() is None, quant.unavailable()  # fail, never skip
        if kind == "q4_k_m":  # as the GGUF's Q4_K_M: some layers' v_proj and down_proj Q6_K
            cls = quant.quant_linear_class()
            for i in (0, 2):
                for owner, name in ((model.model.layers[i].self_attn, "v_proj"),
                                    (model.model.layers[i].mlp, "down_proj")):  # fmt: skip
                    old = getattr(owner, name)
                    parts = quant.quantize_q6(old.weight.detach())
                    setattr(
                        owner, name, cls("q6", quant.pack("q6", parts), old.in_features, old.bias)
                    )
            assert quant.quantize_model(model, "q4") == 22 - 4
        else:
            assert quant.quantize_model(model, kind) == 22
    assert kernels.apply(model, "exact") == "exact"
    assert lean.install(model) is on and model.adapld_lean is on
    return model


def _trace(model) -> list[torch.Tensor]:
    """Everything a generation reads from the forward: a 300-token prefill (a stock-sized
    chunk, then a lean-sized one), a chain, a tree pass, single steps; logits of every row,
    the hooked layer's states and the cache."""
    runner = ModelRunner(model, hidden_layer=1, want_hidden=True, capacity=64)
    prompt = _prompt(3, 300)
    hidden, topk = runner.prefill(prompt, 4)
    out = [hidden, topk]
    chain = runner.step([5, 6, 7, 8], None, None)
    out += [chain.logits.rows(list(range(4))), chain.hidden]
    past = runner.cache_len
    depths: list[int] = []
    for p in PARENTS:
        depths.append(0 if p < 0 else depths[p] + 1)
    tokens = [9 + i for i in range(len(PARENTS))]
    tree = runner.step(tokens, depths, tree_mask(PARENTS, past, runner.dtype, runner.device))
    out += [tree.logits.rows(list(range(len(tokens)))), tree.hidden]
    runner.keep(past, [0, 1, 4, 5])
    for t in (3, 1, 4):
        step = runner.step([t], None, None)
        out += [step.logits.row(0), step.hidden]
    for layer in runner.cache.layers:
        out += [layer.keys, layer.values]
    runner.close()
    return out


@pytest.mark.parametrize(("dtype", "kind", "activations"), WEIGHTS, ids=IDS)
@pytest.mark.parametrize("arch", ["qwen2", "qwen3", "llama"])
def test_lean_forward_is_the_stock_forward_bit_for_bit(arch, dtype, kind, activations, monkeypatch):
    stock = _trace(_model(arch, dtype, kind, activations, monkeypatch, on=False))
    model = _model(arch, dtype, kind, activations, monkeypatch, on=True)
    calls = {"python": 0, "native": 0}

    def counted(name, real):
        def run(*args):
            calls[name] += 1
            return real(*args)

        return run

    monkeypatch.setattr(lean, "_attention", counted("python", lean._attention))
    monkeypatch.setattr(lean, "_native_forward", counted("native", lean._native_forward))
    fast = _trace(model)
    # the lean layers ran: 3 layers x (last prefill chunk + 5 passes), natively on int8 inputs
    # (Qwen3's per-head q/k norms: always the Python form)
    native = activations == "int8" and arch != "qwen3"
    assert calls["native" if native else "python"] >= 3 * 6, calls
    assert calls["python" if native else "native"] == 0, calls
    assert len(fast) == len(stock)
    for i, (a, b) in enumerate(zip(stock, fast, strict=True)):
        assert a.shape == b.shape and torch.equal(a, b), f"item {i} differs"


@pytest.mark.parametrize("kind", ["q4", "q6"])
def test_fused_projections_are_the_separate_layers(kind, monkeypatch):
    model = _model("qwen2", torch.bfloat16, kind, "int8", monkeypatch, on=True)
    attn, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
    qkv, gate_up = attn.adapld_qkv, mlp.adapld_gate_up
    assert qkv.fused and gate_up.fused and qkv.sizes == [32, 16, 16]
    for rows in (1, 3, 8, 64, 70):  # the group-by-group and the blocked forms
        x = torch.randn(rows, 32).bfloat16()
        for fused in (qkv, gate_up):
            outs = fused(x)
            for part, y in zip(fused.parts, outs, strict=True):
                assert torch.equal(part(x), y) and y.is_contiguous()


def test_bfloat16_inputs_are_not_fused(monkeypatch):
    model = _model("qwen2", torch.bfloat16, "q4", "bfloat16", monkeypatch, on=True)
    assert not model.model.layers[0].self_attn.adapld_qkv.fused


def test_mixed_kinds_are_one_call_per_kind(monkeypatch):
    monkeypatch.setenv(quant.ENV_ACTIVATIONS, "int8")
    cls = quant.quant_linear_class()
    a = cls("q4", quant.pack("q4", quant.quantize_q4(torch.randn(32, 64))), 64)
    b = cls("q6", quant.pack("q6", quant.quantize_q6(torch.randn(16, 64))), 64)
    both = lean.fuse([a, b])
    assert both.fused and [len(g) for g in both.groups] == [1, 1]
    x = torch.randn(2, 64).bfloat16()
    ya, yb = both(x)
    assert torch.equal(ya, a(x)) and torch.equal(yb, b(x))


def test_left_alone_where_it_does_not_apply(monkeypatch):
    gpt2 = tiny_model("gpt2", dtype="float32")
    kernels.apply(gpt2, "exact")
    lean.install(gpt2)
    assert gpt2.adapld_lean is False and "not a qwen2 or qwen3 or llama" in lean.reason(gpt2)
    packed = tiny_model("qwen2", dtype="float32")
    kernels.apply(packed, "packed")
    lean.install(packed)
    assert packed.adapld_lean is False
    assert lean.reason(packed) == "the exact kernels are not in use"
    monkeypatch.setenv(lean.ENV_LEAN, "off")
    off = tiny_model("qwen2", dtype="float32")
    kernels.apply(off, "exact")
    lean.install(off)
    assert off.adapld_lean is False and lean.reason(off) is None


def test_transformers_generate_still_runs_stock(monkeypatch):
    """transformers' own generate (2D padding masks, its own cache) takes the stock path and
    gives the tokens it gives without the lean forward."""
    prompt = torch.tensor([_prompt(1, 20)])
    outs = []
    for on in (False, True):
        model = _model("qwen2", torch.float32, None, None, monkeypatch, on=on)
        outs.append(model.generate(prompt, max_new_tokens=12, do_sample=False))
    assert torch.equal(outs[0], outs[1])


def test_cache_keyword_follows_the_installed_transformers():
    """The cache goes to transformers under the name its forward takes: ``cache`` in recent
    releases, ``past_key_values`` in older ones (5.17, the lent GPU machine's); passing the
    other name is silently swallowed there and the stock forward builds a cache of its own."""
    import inspect

    from transformers.modeling_outputs import BaseModelOutputWithPast
    from transformers.models.qwen2 import modeling_qwen2

    from adapld_cli.compat import cache_keyword

    def new(self, input_ids=None, cache=None, **kwargs): ...

    def old(self, input_ids=None, past_key_values=None, **kwargs): ...

    assert (cache_keyword(new), cache_keyword(old)) == ("cache", "past_key_values")
    for cls in (modeling_qwen2.Qwen2Model, modeling_qwen2.Qwen2DecoderLayer):
        name = cache_keyword(cls.forward)
        assert name in inspect.signature(cls.forward).parameters
        assert name in BaseModelOutputWithPast.__dataclass_fields__
