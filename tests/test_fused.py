"""Fused RMSNorm on CUDA (``adapld_cli.model.fused``): the modules it rewires, one kernel a
norm in a static pass instead of eight, the stock numbers to the dtype's rounding, and plain
decoding and adapld still emitting the same tokens through the GPU's default passes
(uniform, key planes). Run on the CPU, where torch's ``rms_norm`` is one op too; the GPU
check measures what it saves there."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from adapld_cli.engine import AdaPLDSettings, GenerationConfig, generate
from adapld_cli.engine.adapter import ModelRunner
from adapld_cli.model.fused import fuse_norms
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


def test_fused_norms_rewire_the_known_norms_on_cuda_only(monkeypatch):
    model = _model()
    layers = model.config.num_hidden_layers
    assert fuse_norms(model, "cpu") == 0
    monkeypatch.setenv("ADAPLD_FUSED_NORMS", "0")
    assert fuse_norms(model, "cuda") == 0
    monkeypatch.delenv("ADAPLD_FUSED_NORMS")
    assert fuse_norms(model, "cuda") == 2 * layers + 1  # two a layer, the final norm
    assert fuse_norms(model, "cuda") == 0  # once
    assert fuse_norms(_model("llama"), "cuda") == 2 * layers + 1
    assert fuse_norms(tiny_model("gpt2"), "cuda") == 0  # LayerNorm: not an RMSNorm
    norm = model.model.norm
    x = torch.randn(2, 5, 256, dtype=torch.float32)  # another dtype than the weight's
    assert torch.equal(norm(x), norm.stock_forward(x))


def test_fused_norms_keep_the_numbers_and_plain_decoding_equal(monkeypatch):
    """One kernel a norm in a static pass (no rsqrt); the logits of a pass are the stock
    forward's to bfloat16 rounding; greedy ar and adapld (a full tree: branch and semantic
    drafts) emit the same tokens through uniform passes with key planes."""
    stock, model = _model(), _model()
    fuse_norms(model, "cuda")
    rng = random.Random(0)
    prompt = [rng.randrange(1024) for _ in range(300)]
    logits = []
    for m in (stock, model):
        runner = ModelRunner(m, hidden_layer=None, want_hidden=False, capacity=512, static=True,
                             shapes=(80,), planes=True, span=64)  # fmt: skip
        with one_thread():
            runner.prefill(prompt[:-1], top_k=0)
            ops = Ops()
            with ops:
                out = runner.verify(prompt[-8:], None, None).logits
            logits.append(out.rows(list(range(8))).float())
        runner.close()
        norms = 2 * m.config.num_hidden_layers + 1
        if m is model:
            assert ops.ops["rms_norm"] == norms and ops.ops["rsqrt"] == 0
        else:
            assert ops.ops["rsqrt"] == norms  # teeth: the stock forward's eight ops
    assert not torch.equal(*logits)  # other roundings ...
    assert torch.allclose(*logits, atol=0.1, rtol=0.05)  # ... of the same numbers

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
