"""4/6-bit weights on the quantized CPU kernels (adapld_cli.model.quant): the kernels read a
GGUF's Q4_K / Q6_K blocks exactly, every row of an M-row product is the row computed alone
(any M, any thread count), a K-quant GGUF loads onto them with ``--weights quantized`` (the
default where they run), and its draft-tree rows equal single decoding steps bit for bit.
Greedy AdaPLD on quantized tiny models is checked against plain decoding in test_kernels.py.
These tests never skip for a missing compiler: on a CPU with AVX-512 BF16 or AVX2 + FMA the
kernels must build (they skip only on a CPU with neither, where adapld runs dequantised
weights); on an AVX2 CPU they test the AVX2 build (qmm_avx2.h)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from adapld_cli.model import ModelError, kernels, load, quant
from adapld_cli.model.convert import MANIFEST, QUANT
from tests.test_kernels import dfs_tree, tree_pass, tree_vs_sequential
from tests.test_model_gguf import write_tiny_gguf

if "AVX-512 BF16" in (quant.unavailable() or ""):
    pytest.skip(quant.unavailable(), allow_module_level=True)

SHAPES = {"q4": (48, 96), "q6": (32, 80), "q8": (48, 96)}
# two full super-blocks and a partial one (the blocked int8 form walks super-blocks)
WIDE = {"q4": (32, 608), "q6": (16, 592), "q8": (32, 608)}
QUANTIZE = {"q4": quant.quantize_q4, "q6": quant.quantize_q6, "q8": quant.quantize_q8}


@pytest.fixture(autouse=True)
def _kernels_build():
    assert quant.unavailable() is None, quant.unavailable()


def _layer(kind: str, seed: int = 0, activations: str = "bfloat16", wide: bool = False):
    n, k = (WIDE if wide else SHAPES)[kind]
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=gen) * 0.05
    parts = QUANTIZE[kind](w)
    bias = torch.randn(n, generator=gen).bfloat16()
    layer = quant.quant_linear_class()(kind, quant.pack(kind, parts), k, bias, activations)
    return layer, quant.dequantize(kind, parts), bias


def q8_rows(x: torch.Tensor) -> torch.Tensor:
    """``x [M, K]`` as the int8 kernels see it: per row and 256 inputs ``xs * xq`` with
    ``xs = max|x| / 127`` and ``xq = round(x * (127 / max|x|))`` (to even), in float32."""
    x = x.float()
    out = torch.empty_like(x)
    for k0 in range(0, x.shape[1], 256):
        block = x[:, k0 : k0 + 256]
        top = block.abs().amax(1, keepdim=True)
        inv = torch.where(top > 0, torch.tensor(127.0) / top, torch.zeros_like(top))
        out[:, k0 : k0 + 256] = torch.round(block * inv) * (top / 127)
    return out


def assert_tree_rows_are_steps(model, nodes: int) -> None:
    """A random ``nodes``-node draft tree over a 40-token prompt of a tiny GGUF model: every
    row bit for bit the single decoding step of its path."""
    gen = torch.Generator().manual_seed(0)
    prefix = torch.randint(0, 250, (40,), generator=gen).tolist()
    parents = dfs_tree(nodes, seed=1)
    tokens = torch.randint(0, 250, (len(parents),), generator=gen).tolist()
    assert tree_vs_sequential(model, prefix, tokens, parents) == (len(parents), 0.0)


ACTIVATIONS = list(quant.ACTIVATIONS)  # both run on either target


@pytest.mark.parametrize("wide", [False, True], ids=["narrow", "wide"])
@pytest.mark.parametrize("activations", ACTIVATIONS)
@pytest.mark.parametrize("kind", quant.KINDS)
def test_every_row_is_the_row_alone_for_any_row_count_and_threads(kind, activations, wide):
    if kind == "q8" and activations != "int8":  # q8 takes int8 inputs only (see below)
        with pytest.raises(ValueError, match="int8 inputs only"):
            _layer(kind, activations=activations, wide=wide)
        return
    layer, w, bias = _layer(kind, activations=activations, wide=wide)
    x = (torch.randn(130, w.shape[1], generator=torch.Generator().manual_seed(1))).bfloat16()
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        alone = torch.cat([layer(x[i : i + 1]) for i in range(len(x))])
        torch.set_num_threads(2)
        for m in range(1, len(x) + 1):
            assert torch.equal(layer(x[:m]), alone[:m]), m
    finally:
        torch.set_num_threads(old)
    # the GGUF's values times the inputs the kernel takes, summed in float32, rounded once
    inputs = q8_rows(x) if activations == "int8" else x.float()
    ref = inputs @ w.T + bias.float()
    assert alone.dtype == torch.bfloat16
    assert (alone.float() - ref).abs().max() <= ref.abs().max() * 2**-8
    if activations == "int8":  # and close to the bfloat16 inputs' product
        exact = x.float() @ w.T + bias.float()
        assert (alone.float() - exact).abs().max() <= exact.abs().max() * 2**-5
    assert layer(x.reshape(2, 65, -1)).shape == (2, 65, w.shape[0])  # batch dimensions kept


@pytest.mark.parametrize("kind", ["Q4_K", "Q6_K", *quant.Q8_TYPES])
def test_gguf_blocks_are_read_exactly(kind):
    """Every GGUF type on the kernels: the parts stand for the very values ``gguf``
    dequantises, and (q8) the packed layout gives them back."""
    from gguf import GGMLQuantizationType, dequantize

    from tests.test_model_gguf import random_blocks

    ggml = GGMLQuantizationType[kind]
    blocks = random_blocks((32, 512), ggml, np.random.default_rng(0))
    name, parts = quant.gguf_parts(kind, blocks, 32, 512)
    ref = torch.from_numpy(dequantize(blocks, ggml).reshape(32, 512))
    assert torch.equal(quant.dequantize(name, parts), ref)
    if name == "q8":
        assert torch.equal(quant.unpack_q8(quant.pack(name, parts)), ref)


def test_quantize_round_trips_within_a_step():
    """Weights quantized for models without a GGUF come back within one step of each group."""
    w = torch.randn(32, 256, generator=torch.Generator().manual_seed(3)) * 0.05
    for kind, group in (("q4", 32), ("q6", 16)):
        parts = getattr(quant, f"quantize_{kind}")(w)
        g = w.reshape(32, -1, group)
        step = (g.amax(-1) - g.amin(-1)) / 15 if kind == "q4" else g.abs().amax(-1) / 31
        err = (quant.dequantize(kind, parts) - w).abs().reshape(32, -1, group).amax(-1)
        assert (err <= step).all(), kind


# ----------------------------------------------------------------------------- a K-quant GGUF

QUANT_TYPES = {
    "token_embd.weight": "Q4_K",
    "blk.0.attn_q.weight": "Q4_K",
    "blk.0.attn_k.weight": "Q4_K",
    "blk.0.attn_v.weight": "Q6_K",
    "blk.0.attn_output.weight": "Q4_K",
    "blk.0.ffn_gate.weight": "Q4_K",
    "blk.0.ffn_up.weight": "Q4_K",
    "blk.0.ffn_down.weight": "Q6_K",
    "output.weight": "Q6_K",  # 262 rows: not a multiple of 16, stays dequantised
}


@pytest.fixture(scope="module")
def kquant_gguf(tmp_path_factory) -> Path:
    from gguf import GGMLQuantizationType

    path = tmp_path_factory.mktemp("kq") / "tiny-kquant.gguf"
    types = {k: GGMLQuantizationType[v] for k, v in QUANT_TYPES.items()}
    write_tiny_gguf(path, hidden=256, heads=4, kv=2, ffn=512, quant=types)
    return path


@pytest.mark.parametrize("activations", ACTIVATIONS)
def test_kquant_gguf_loads_on_the_kernels_and_stays_exact(kquant_gguf, monkeypatch, activations):
    monkeypatch.delenv("ADAPLD_WEIGHTS", raising=False)
    monkeypatch.setenv(quant.ENV_ACTIVATIONS, activations)
    loaded = load(str(kquant_gguf), device="cpu", dtype="bfloat16")  # auto: quantized here
    assert loaded.weights == "quantized" and loaded.activations == activations
    folder = Path(loaded.path)
    assert folder.name.endswith("-quantized")
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["weights"] == "quantized" and QUANT in manifest["files"]
    model = loaded.model
    cls = quant.quant_linear_class()
    layer = model.model.layers[0]
    kinds = {name: module.kind for name, module in layer.named_modules() if isinstance(module, cls)}
    assert {m.activations for m in model.modules() if isinstance(m, cls)} == {activations}
    assert kinds == {
        "self_attn.q_proj": "q4",
        "self_attn.k_proj": "q4",
        "self_attn.v_proj": "q6",
        "self_attn.o_proj": "q4",
        "mlp.gate_proj": "q4",
        "mlp.up_proj": "q4",
        "mlp.down_proj": "q6",
    }
    assert not isinstance(model.lm_head, cls)  # shape does not fit: packed bfloat16
    assert not any(p.is_meta for p in model.parameters())
    # The same numbers as the dequantised model, up to bfloat16 rounding of the weights (and
    # with int8 activations, fed the same 8-bit inputs).
    plain = load(str(kquant_gguf), device="cpu", dtype="bfloat16", weights="dequantized")
    assert plain.weights == "dequantized" and plain.path != loaded.path
    # The embedding stays in its GGUF blocks, each row the dequantised table's bit for bit.
    from adapld_cli.model.convert import packed_embedding_class

    embed = model.get_input_embeddings()
    assert isinstance(embed, packed_embedding_class())
    every = torch.arange(embed.num_embeddings)[None]
    with torch.no_grad():
        assert torch.equal(embed(every), plain.model.get_input_embeddings()(every))
    if activations == "int8":
        for name in kinds:
            plain.model.model.layers[0].get_submodule(name).register_forward_pre_hook(
                lambda _module, args: (
                    q8_rows(args[0].reshape(-1, args[0].shape[-1]))
                    .to(args[0].dtype)
                    .reshape(args[0].shape),
                )
            )
    ids = torch.tensor([list(range(3, 40))])
    with torch.no_grad():
        a, b = model(ids).logits.float(), plain.model(ids).logits.float()
    gap = (a - b).abs().max()
    assert gap <= 0.05 * b.abs().max()
    # The same greedy token wherever the plain model's choice is clearer than the gap (the
    # attention's bfloat16 rounding can turn a near-tie of a random model either way).
    top2 = b.topk(2, dim=-1).values
    clear = (top2[..., 0] - top2[..., 1]) > 2 * gap
    assert clear.sum() >= 8  # not a vacuous check
    assert torch.equal(a.argmax(-1)[clear], b.argmax(-1)[clear])
    assert_tree_rows_are_steps(model, 65)  # a widest draft tree


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_kquant_gguf_of_other_architectures_runs_the_files_weights(arch, tmp_path, monkeypatch):
    """A Llama GGUF (``attn_q``/``attn_k`` rows stored in llama.cpp's rotary order, which
    transformers' reader reorders) and a Qwen3 one (per-head q/k norms, a head size other
    than its class default) keep every K-quant linear on the kernels, and each computes the
    very weights the dequantising reader gives; draft-tree rows are single steps."""
    from gguf import GGMLQuantizationType

    monkeypatch.setenv(quant.ENV_ACTIVATIONS, "bfloat16")  # products of exact weights
    path = tmp_path / f"tiny-{arch}.gguf"
    types = {k: GGMLQuantizationType[v] for k, v in QUANT_TYPES.items()}
    write_tiny_gguf(path, hidden=256, heads=4, kv=2, ffn=512, quant=types, arch=arch)
    loaded = load(str(path), device="cpu", dtype="bfloat16")
    plain = load(str(path), device="cpu", dtype="bfloat16", weights="dequantized")
    assert loaded.weights == "quantized" and type(loaded.model).__name__.lower().startswith(arch)
    assert loaded.model.config.head_dim == 64  # from the file's key_length
    cls = quant.quant_linear_class()
    layer, reference = loaded.model.model.layers[0], plain.model.model.layers[0]
    kinds = {n: m.kind for n, m in layer.named_modules() if isinstance(m, cls)}
    assert len(kinds) == 7, kinds
    for name in kinds:  # x = I: y = W, every weight where the reader puts it
        eye = torch.eye(reference.get_submodule(name).in_features, dtype=torch.bfloat16)
        with torch.no_grad():
            got = layer.get_submodule(name)(eye)
            want = reference.get_submodule(name)(eye)
        assert torch.equal(got, want), name
    assert loaded.model.adapld_lean
    assert_tree_rows_are_steps(loaded.model, 33)


# the 32-input block formats and Q5_K (the q8 kind), as a Q4_K_M or Q8_0 file of a model
# whose widths are not multiples of 256 stores many of its linears
BLOCK_TYPES = {
    "token_embd.weight": "Q8_0",
    "blk.0.attn_q.weight": "Q5_0",
    "blk.0.attn_k.weight": "Q5_0",
    "blk.0.attn_v.weight": "Q8_0",
    "blk.0.attn_output.weight": "Q4_0",
    "blk.0.ffn_gate.weight": "Q4_1",
    "blk.0.ffn_up.weight": "Q5_1",
    "blk.0.ffn_down.weight": "Q5_K",
}


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_block_format_gguf_runs_every_linear_on_the_kernels(arch, tmp_path, monkeypatch):
    """Q8_0, Q5_0, Q5_1, Q4_0, Q4_1 and Q5_K linears stay in their integers (q8), each the
    file's weights where the reader puts them (int8 inputs: a one-hot row gives its weights
    up to the input scale's rounding), and draft-tree rows are single steps bit for bit."""
    from gguf import GGMLQuantizationType

    monkeypatch.delenv(quant.ENV_ACTIVATIONS, raising=False)
    path = tmp_path / f"tiny-blocks-{arch}.gguf"
    types = {k: GGMLQuantizationType[v] for k, v in BLOCK_TYPES.items()}
    write_tiny_gguf(path, hidden=256, heads=4, kv=2, ffn=512, quant=types, arch=arch)
    loaded = load(str(path), device="cpu", dtype="bfloat16")
    monkeypatch.setenv("ADAPLD_KERNELS", "stock")  # plain nn.Linear weights to compare
    plain = load(str(path), device="cpu", dtype="float32", weights="dequantized")
    assert (loaded.weights, loaded.activations) == ("quantized", "int8")
    cls = quant.quant_linear_class()
    layer, reference = loaded.model.model.layers[0], plain.model.model.layers[0]
    kinds = {n: m.kind for n, m in layer.named_modules() if isinstance(m, cls)}
    assert set(kinds.values()) == {"q8"} and len(kinds) == 7, kinds
    for name in kinds:
        want = reference.get_submodule(name).weight.detach().float()  # [out, in]
        eye = torch.eye(want.shape[1], dtype=torch.bfloat16)
        module = layer.get_submodule(name)
        bias = torch.zeros(1) if module.fbias is None else module.fbias
        with torch.no_grad():
            got = module(eye).float() - bias  # [in, out]; the output rounded to bfloat16
        top = (want.abs().max() + bias.abs().max()).item()  # a misplaced weight is ~top off
        assert (got.T - want).abs().max().item() <= 2**-7 * top, name
    assert loaded.model.adapld_lean
    assert_tree_rows_are_steps(loaded.model, 65)
    # bfloat16 activations: q8 layers become bfloat16 linears of the same weights, packed
    monkeypatch.delenv("ADAPLD_KERNELS")
    monkeypatch.setenv(quant.ENV_ACTIVATIONS, "bfloat16")
    half = load(str(path), device="cpu", dtype="bfloat16").model.model.layers[0]
    packed = kernels.packed_linear_class()
    assert all(isinstance(half.get_submodule(name), packed) for name in kinds)


def test_activations_choice_is_checked(kquant_gguf, monkeypatch):
    monkeypatch.delenv(quant.ENV_ACTIVATIONS, raising=False)
    assert quant.resolve_activations() == "int8"
    assert quant.resolve_activations("int8") == "int8"
    assert quant.resolve_activations("bfloat16") == "bfloat16"
    monkeypatch.setenv(quant.ENV_ACTIVATIONS, "int4")
    with pytest.raises(ModelError, match="ADAPLD_ACTIVATIONS=int4: use one of auto, int8"):
        load(str(kquant_gguf), device="cpu", dtype="bfloat16")
    # dequantized weights take no activation format
    plain = load(str(kquant_gguf), device="cpu", dtype="bfloat16", weights="dequantized")
    assert plain.activations == "" and plain.weights_label() == "dequantized weights"


def test_weights_choice_is_explicit_and_checked(kquant_gguf, monkeypatch):
    monkeypatch.setenv("ADAPLD_WEIGHTS", "dequantized")
    assert load(str(kquant_gguf), device="cpu", dtype="bfloat16").weights == "dequantized"
    monkeypatch.setenv("ADAPLD_WEIGHTS", "quantized")
    with pytest.raises(ModelError, match="compute in bfloat16, not float32"):
        load(str(kquant_gguf), device="cpu", dtype="float32")
    assert load(str(kquant_gguf), device="cpu", dtype="float32", weights="auto").weights == (
        "dequantized"
    )
    monkeypatch.setenv("ADAPLD_KERNELS", "stock")
    with pytest.raises(ModelError, match="ADAPLD_KERNELS=stock"):
        load(str(kquant_gguf), device="cpu", dtype="bfloat16")
    monkeypatch.delenv("ADAPLD_KERNELS")
    with pytest.raises(ModelError, match="use one of auto, quantized, dequantized"):
        load(str(kquant_gguf), device="cpu", weights="int3")
    folder = Path(load(str(kquant_gguf), device="cpu", dtype="bfloat16").path)
    with pytest.raises(ModelError, match="need a GGUF file or an embedded model"):
        load(str(folder), device="cpu", dtype="bfloat16")  # a local folder


def test_kernels_load_once_per_process_whatever_the_home(tmp_path, monkeypatch):
    """A second ``$ADAPLD_HOME`` in one process gets the loaded module and a copy of its
    library (loading a second copy of the same pybind11 classes fails: "DecodeLayer is
    already registered"); a new process finds the copy there and builds nothing."""
    import subprocess
    import sys

    first = quant.extension()
    monkeypatch.setenv("ADAPLD_HOME", str(tmp_path))
    assert quant.extension() is first
    folder, name = quant._build_dir()
    assert (folder / f"{name}.so").is_file() and str(folder).startswith(str(tmp_path))
    code = (
        "from adapld_cli.model import quant\n"
        "import torch.utils.cpp_extension as c\n"
        "c.load = None  # building would fail\n"
        "print(quant.extension().DecodeLayer.__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "DecodeLayer", out.stderr


def test_the_build_target_follows_the_cpu(monkeypatch):
    """AVX-512 BF16 + VNNI builds qmm.cpp natively, AVX2 + FMA through qmm_avx2.h (the
    tests above then run that build), anything less builds nothing; the flags of the chosen
    target are the compiler's, and the header is part of the build's digest."""
    monkeypatch.delenv(quant.ENV_TARGET, raising=False)  # the CPU's own choice first
    native = quant.target()
    assert native in quant.TARGETS  # this module runs only where the kernels do
    assert set(quant.TARGETS[native][1]) <= set(quant.cflags())
    assert all(h.is_file() for h in quant.HEADERS)
    avx512 = set(quant.TARGETS["avx512"][0])
    for flags, expected in [
        (avx512 | {"avx2", "fma", "f16c", "amx_tile", "amx_int8", "amx_bf16"}, "amx"),
        (avx512 | {"avx2", "fma", "f16c", "amx_tile", "amx_int8"}, "avx512"),  # without bf16
        (avx512 | {"avx2", "fma", "f16c", "amx_tile"}, "avx512"),  # tiles without int8
        (avx512 | {"avx2", "fma", "f16c"}, "avx512"),
        ({"avx2", "fma", "f16c", "avx512f"}, "avx2"),  # AVX-512 without BF16: the AVX2 build
        ({"avx2", "f16c"}, None),  # no FMA
        ({"sse4_2"}, None),
    ]:
        monkeypatch.setattr(quant, "_cpu_flags", lambda flags=flags: flags)
        assert quant.target() == expected
        if expected is None:
            assert quant._static_reason.__wrapped__() == (
                "this CPU has neither AVX-512 BF16 nor AVX2 with FMA"
            )
            assert quant.cflags() == quant.COMMON_CFLAGS
    # $ADAPLD_QMM_TARGET names a build; one the CPU lacks (or an unknown name) builds nothing
    both = avx512 | {"avx2", "fma", "f16c"}
    for flags, wanted, expected, reason in [
        (both, "avx2", "avx2", None),
        (both, "AVX512", "avx512", None),
        (
            {"avx2", "fma", "f16c"},
            "avx512",
            None,
            "ADAPLD_QMM_TARGET=avx512: this CPU lacks avx512_bf16, ",
        ),
        (both, "amx", None, "ADAPLD_QMM_TARGET=amx: this CPU lacks amx_bf16, amx_int8, amx_tile"),
        (both, "sse", None, "ADAPLD_QMM_TARGET=sse: use one of auto, amx, avx512, avx2"),
    ]:
        monkeypatch.setattr(quant, "_cpu_flags", lambda flags=flags: flags)
        monkeypatch.setenv(quant.ENV_TARGET, wanted)
        assert quant.target() == expected
        if reason:
            assert quant._static_reason.__wrapped__().startswith(reason)


def test_auto_dtype_runs_a_gguf_on_the_kernels_on_any_target(kquant_gguf, monkeypatch):
    """``--dtype auto`` on a CPU takes bfloat16 for a K-quant GGUF wherever the kernels run,
    AVX2 CPUs included (where a model of float weights stays float32: oneDNN has no bfloat16
    kernels there); dequantized weights keep the CPU's own choice."""
    from adapld_cli.model.placement import cpu_bf16

    monkeypatch.delenv("ADAPLD_WEIGHTS", raising=False)
    loaded = load(str(kquant_gguf), device="cpu")
    assert (loaded.weights, loaded.dtype) == ("quantized", "bfloat16")
    plain = load(str(kquant_gguf), device="cpu", weights="dequantized")
    assert plain.dtype == ("bfloat16" if cpu_bf16() else "float32")


def _float32_product(layer, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)`` as the kernel's float32 sums, before its rounding to bfloat16."""
    if layer.int8:
        args = (layer.kind, x, layer.qp, layer.sc, layer.dd, layer.offsets, layer.fbias)
        return layer.run_i8(*args, True)
    return layer.run(x, layer.qp, layer.sc, layer.dd, layer.fbias, True)


def cross_build_outputs(gguf: str, out: str) -> None:
    """What the test below compares, computed by the build ``$ADAPLD_QMM_TARGET`` picks (run
    in a process of its own: one process loads one build): every quantized product of the
    row-count test (both kinds and activations, narrow and wide, 65 rows and one, in bfloat16
    and as the float32 sums before that rounding), and the
    K-quant GGUF's logits over a prompt and over a widest draft tree, both activations."""
    import os

    from adapld_cli.engine.runner import ModelRunner

    results: dict[str, object] = {"target": quant.target()}
    with torch.no_grad():
        for kind in quant.KINDS:
            for activations in ACTIVATIONS if kind != "q8" else ["int8"]:
                for wide in (False, True):
                    layer, w, _ = _layer(kind, activations=activations, wide=wide)
                    gen = torch.Generator().manual_seed(1)
                    x = torch.randn(65, w.shape[1], generator=gen).bfloat16()
                    key = f"{kind}-{activations}-{wide}"
                    results[key], results[key + "-row"] = layer(x), layer(x[:1])
                    results[key + "-f32"] = _float32_product(layer, x)  # before rounding
        for activations in ACTIVATIONS:
            os.environ[quant.ENV_ACTIVATIONS] = activations
            model = load(gguf, device="cpu", dtype="bfloat16").model
            results[f"logits-{activations}"] = model(torch.tensor([list(range(3, 40))])).logits
            runner = ModelRunner(model, hidden_layer=None, want_hidden=False)
            gen = torch.Generator().manual_seed(0)
            runner.prefill(torch.randint(0, 250, (40,), generator=gen).tolist(), 0)
            parents = dfs_tree(65, seed=1)
            tokens = torch.randint(0, 250, (len(parents),), generator=gen).tolist()
            results[f"tree-{activations}"] = tree_pass(runner, tokens, parents)
    torch.save(results, out)


@pytest.mark.parametrize("other", ["avx2", "amx"])
def test_each_build_computes_what_the_avx512_build_does(other, kquant_gguf, tmp_path):
    """qmm_avx2.h's emulation and qmm_amx.h's tiles are bit-exact: on a CPU that runs both
    builds, each one's products (65 rows: the tiles' form; one row) and a K-quant model's
    logits (prompt and draft tree, int8 and bfloat16 activations) are the AVX-512 build's bit
    for bit, so every exactness test run on one target holds on the other. Needs a CPU that
    runs both (an AVX2-only one has nothing to compare with; there the tests above run the
    AVX2 build itself, as they run the AMX build on an AMX CPU). One part of the amx build is
    not the avx512 build's arithmetic: its attention over a bfloat16 cache (attn_amx.h, its
    own flash-style sums), so the amx run here has it off ($ADAPLD_ATTN_TILES=0) and the rest
    of that build is compared; the tiles' attention is exact in itself (test_kernels,
    test_attention_long), and with it on this model's logits differ in the last bits."""
    import os
    import subprocess
    import sys

    if not set(quant.TARGETS["avx512"][0]) | set(quant.TARGETS[other][0]) <= quant._cpu_flags():
        pytest.skip(f"needs a CPU that runs both builds (avx512 and {other})")
    code = (
        "import sys\nfrom tests.test_quant import cross_build_outputs\n"
        "cross_build_outputs(sys.argv[1], sys.argv[2])\n"
    )
    root = Path(__file__).resolve().parent.parent
    got = {}
    for name in ("avx512", other):
        env = {**os.environ, quant.ENV_TARGET: name, quant.ENV_ATTN_TILES: "0"}
        out = tmp_path / f"{name}.pt"
        done = subprocess.run(
            [sys.executable, "-c", code, str(kquant_gguf), str(out)],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        got[name] = torch.load(out)
        assert got[name].pop("target") == name
    assert got["avx512"].keys() == got[other].keys() and len(got[other]) == 34
    for key, value in got["avx512"].items():
        assert torch.equal(value, got[other][key]), key
