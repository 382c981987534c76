"""Fused small ops on CUDA (``adapld_cli.model.fused``): the modules it rewires, one op a
norm in a static pass instead of eight (the stock numbers to the dtype's rounding), the
rotary embedding of queries and keys at once (the stock numbers bit for bit), and plain
decoding and adapld still emitting the same tokens through the GPU's default passes
(uniform, key planes). Run on the CPU, where torch's ``rms_norm`` is one op too; the GPU
check measures what it saves there."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from adapld_cli.engine import AdaPLDSettings, GenerationConfig, generate
from adapld_cli.engine.runner import ModelRunner
from adapld_cli.model.fused import fuse, fuse_norms, fuse_products, fuse_rope
from tests.test_engine_lossless import SETTINGS
from tests.tiny_models import one_thread, tiny_model


def _model(arch: str = "qwen2"):
    """A stock-kernel bfloat16 model whose norm weights are not all ones (as a trained
    model's are not: times one, any rounding order gives the same bits)."""
    model = tiny_model(
        arch, dtype="bfloat16", hidden=256, intermediate=768, vocab=1024, positions=2048
    )
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=gen))
    return model


class Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


@pytest.fixture(autouse=True)
def _stock_rope(monkeypatch):
    """The rotary function is rewired module-wide: put the stock ones back after each test."""
    from transformers.models.llama import modeling_llama
    from transformers.models.qwen2 import modeling_qwen2

    for module in (modeling_qwen2, modeling_llama):
        monkeypatch.setattr(module, "apply_rotary_pos_emb", module.apply_rotary_pos_emb)


def test_fuse_rewires_norms_and_rope_on_cuda_only(monkeypatch):
    model = _model()
    layers = model.config.num_hidden_layers
    assert fuse(model, "cpu") == (0, 0, 0)
    monkeypatch.setenv("ADAPLD_FUSED", "0")
    assert fuse(model, "cuda") == (0, 0, 0)
    monkeypatch.delenv("ADAPLD_FUSED")
    # two norms a layer and the final one; the rotary function; attention and MLP a layer
    assert fuse(model, "cuda") == (2 * layers + 1, 1, 2 * layers)
    assert fuse(model, "cuda") == (0, 0, 0)  # once
    assert fuse(_model("llama"), "cuda") == (2 * layers + 1, 1, 2 * layers)
    assert fuse(tiny_model("gpt2"), "cuda") == (0, 0, 0)  # LayerNorm, Conv1D: not these
    attn = model.model.layers[0].self_attn  # the parts' weights are views of the joint one
    joint = attn.q_proj.joint_of
    assert attn.k_proj.weight.data_ptr() == joint.weight[attn.q_proj.out_features :].data_ptr()
    norm = model.model.norm
    x = torch.randn(2, 5, 256, dtype=torch.float32)  # another dtype than the weight's
    assert torch.equal(norm(x), norm.stock_forward(x))


def _pass(model, prompt: list[int]) -> tuple[torch.Tensor, Counter]:
    """The logits of a uniform static pass (key planes) over the last 8 tokens, and the ops
    it dispatched."""
    runner = ModelRunner(model, hidden_layer=None, want_hidden=False, capacity=512, static=True,
                         shapes=(80,), planes=True, span=64)  # fmt: skip
    with one_thread():
        runner.prefill(prompt[:-8], top_k=0)
        ops = Ops()
        with ops:
            out = runner.verify(prompt[-8:], None, None).logits
        rows = out.rows(list(range(8))).float()
    runner.close()
    return rows, ops.ops


def test_fused_ops_keep_the_numbers_and_plain_decoding_equal():
    """In a static pass: one op a norm instead of eight (no rsqrt), the logits the stock
    forward's to bfloat16 rounding; the joint rotary embedding four ops fewer a layer, the
    logits the stock forward's bit for bit; joint products three fewer a layer; greedy ar
    and adapld (a full tree: branch and semantic drafts) emit the same tokens through
    uniform passes with all three."""
    rng = random.Random(0)
    prompt = [rng.randrange(1024) for _ in range(300)]
    stock, ops = _pass(_model(), prompt)
    layers = _model().config.num_hidden_layers
    assert ops["rsqrt"] == 2 * layers + 1  # teeth: the stock norms' eight ops

    model = _model()
    assert fuse_rope(model) == 1
    rope, rope_ops = _pass(model, prompt)
    assert torch.equal(rope, stock)  # the same operations on every element
    assert ops["mul"] - rope_ops["mul"] == 2 * layers and ops["neg"] - rope_ops["neg"] == layers
    assert ops["add"] - rope_ops["add"] == layers

    assert fuse_norms(model) == 2 * layers + 1
    both, both_ops = _pass(model, prompt)
    assert both_ops["rms_norm"] == 2 * layers + 1 and both_ops["rsqrt"] == 0
    assert not torch.equal(both, stock)  # other roundings ...
    assert torch.allclose(both, stock, atol=0.1, rtol=0.05)  # ... of the same numbers

    assert fuse_products(model) == 2 * layers
    joint, joint_ops = _pass(model, prompt)
    assert ops["linear"] - joint_ops["linear"] == 3 * layers  # q, k, v one; gate, up one
    assert torch.allclose(joint, stock, atol=0.1, rtol=0.05)
    assert model.model.layers[0].self_attn.q_proj.joint_of._parts == []  # nothing kept

    cfg = GenerationConfig(max_new_tokens=48)
    settings = replace(SETTINGS["full-tree"], graphs=True, uniform=True, planes=True)
    accepted = 0
    for seed in range(2):
        rng = random.Random(seed)
        base = [rng.randrange(1024) for _ in range(120)]
        prompt = base + base[:50]
        with one_thread():
            want = generate(model, prompt, cfg, "ar", settings=AdaPLDSettings(uniform=True))
            out = generate(model, prompt, cfg, "adapld", settings=settings)
        assert out.tokens == want.tokens, seed
        accepted += out.stats.accepted_draft_tokens
    assert accepted > 0
