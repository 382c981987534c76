"""The engine on the embedded pretrained model (slow: marked real): a draft tree's rows equal
plain decoding's bit for bit in float32 and bfloat16 (batch-invariant kernels), and greedy
AdaPLD output equals plain greedy decoding (and transformers' ``generate``) token for token
on a real edit prompt, in far fewer forward passes, in the default dtype; the same on the
default model (coder-1.5b) over a real 760-token edit prompt."""

from __future__ import annotations

import pytest
import torch

from adapld_cli.engine import AdaPLDSettings, GenerationConfig, generate
from adapld_cli.model import kernels
from tests.test_engine_lossless import _final_caches
from tests.test_kernels import PARENTS, WIDEST, dfs_tree, tree_vs_sequential

pytestmark = pytest.mark.real


def require_exact_kernels(model) -> None:
    """Skip only where this torch or CPU cannot run the batch-invariant kernels; where it can,
    a model without them is a failure (``load()`` must install them), never a skip."""
    reason = kernels.supported(model)
    if reason is not None:
        pytest.skip(f"batch-invariant kernels cannot run here: {reason}")
    mode = getattr(model, "adapld_kernels", None)
    assert mode == "exact", f"load() left the kernels at {mode!r} (${kernels.ENV_KERNELS} set?)"


CODE = '''import math


def area(radius: float) -> float:
    """Area of a circle."""
    return math.pi * radius ** 2


def describe(radius: float) -> str:
    return f"circle of radius {radius} has area {area(radius):.2f}"
'''


def test_tree_rows_bitwise_equal_plain_decoding_fp32_bf16(embedded):
    from adapld_cli.model import load

    gen = torch.Generator().manual_seed(0)
    prefix = torch.randint(0, 20000, (300,), generator=gen).tolist()
    # a 17-node tree and the widest pass the engine makes (65 rows: past the 32-row blocks
    # AMX CPUs run bfloat16 products in)
    trees = [PARENTS, dfs_tree(WIDEST, seed=0)]
    tokens = torch.randint(0, 20000, (WIDEST,), generator=gen).tolist()
    models = {embedded.dtype: embedded.model}
    for dtype in ("float32", "bfloat16"):
        model = models.get(dtype) or load(device="cpu", dtype=dtype).model
        require_exact_kernels(model)
        for parents in trees:
            n = len(parents)
            assert tree_vs_sequential(model, prefix, tokens[:n], parents) == (n, 0.0), (dtype, n)
        del model


def test_adapld_matches_plain_decoding(embedded):
    from adapld_cli.edit.prompt import build_prompt, load_template

    model, tok = embedded.model, embedded.tokenizer
    prompt = build_prompt(
        load_template(),
        tok,
        code=CODE,
        instruction="rename area to circle_area",
        filename="geometry.py",
        lang="python",
    )
    n = 110
    with torch.inference_mode():
        hf = model.generate(
            torch.tensor([prompt.ids]),
            attention_mask=torch.ones(1, len(prompt.ids), dtype=torch.long),
            do_sample=False,
            max_new_tokens=n,
        )
    config = GenerationConfig(max_new_tokens=n)
    ref = generate(model, prompt.ids, config, "ar").tokens
    assert ref == hf[0, len(prompt.ids) :].tolist()  # plain decoding is transformers' greedy
    out = generate(model, prompt.ids, config, "adapld")
    assert out.tokens == ref
    assert "circle_area" in tok.decode(out.tokens)
    # the adaptive budget follows measured timings; with it off, drafting is deterministic
    fixed = generate(model, prompt.ids, config, "adapld", settings=AdaPLDSettings(adaptive=False))
    assert fixed.tokens == ref
    assert fixed.stats.forward_passes * 3 < fixed.stats.new_tokens  # T > 3


@pytest.mark.default_model
def test_default_model_exact_on_a_long_real_prompt(monkeypatch):
    """coder-1.5b (the default) in its default dtype, after a real 760-token edit prompt (the
    colorsys docstring case): each row of a 17-node tree pass equals plain decoding bit for
    bit, and greedy AdaPLD output equals plain greedy decoding token for token, ending with
    the same KV cache in every layer bit for bit."""
    from adapld_cli.bench.tasks import load_tasks
    from adapld_cli.edit.prompt import build_prompt, load_template
    from adapld_cli.model import load
    from tests.test_edit_cases import CASES_PATH

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    task = next(t for t in load_tasks(CASES_PATH) if t.name == "3_add_docstrings_colorsys")
    loaded = load(device="cpu")
    model = loaded.model
    require_exact_kernels(model)
    from adapld_cli.model import quant

    if quant.unavailable() is None:  # the default path here: 4-bit weights, its activations
        assert loaded.weights == "quantized"
        assert loaded.activations == "int8" and loaded.dtype == "bfloat16"  # AVX2 too
        # the forward users get: the lean one, each layer native where its inputs are int8
        assert model.adapld_lean
        native = [layer.adapld_native is not None for layer in model.model.layers]
        assert all(native) == (loaded.activations == "int8")
    prompt = build_prompt(
        load_template(),
        loaded.tokenizer,
        code=task.before,
        instruction=task.instruction,
        filename=task.filename,
        lang="python",
    )
    assert len(prompt.ids) > 700
    gen = torch.Generator().manual_seed(2)
    tokens = torch.randint(0, 20000, (len(PARENTS),), generator=gen).tolist()
    assert tree_vs_sequential(model, prompt.ids, tokens, PARENTS) == (len(PARENTS), 0.0)
    config = GenerationConfig(max_new_tokens=160)
    kept = _final_caches(monkeypatch)
    ref = generate(model, prompt.ids, config, "ar").tokens
    out = generate(model, prompt.ids, config, "adapld")
    assert out.tokens == ref
    assert out.stats.forward_passes * 2 < out.stats.new_tokens
    for (k0, v0), (k1, v1) in zip(*kept, strict=True):  # every layer's cache, bit for bit
        assert torch.equal(k0, k1) and torch.equal(v0, v1)
