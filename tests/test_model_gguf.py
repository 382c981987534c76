"""Any .gguf file: converted once to a safetensors cache (keyed by path, size, mtime), faithfully.

A tiny GGUF (1 layer, byte-level BPE tokenizer, chat template; Qwen2 unless a test asks for
another architecture) is written in-test with the ``gguf`` package, then goes through the
real conversion and loading code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from adapld_cli.model import ModelError, load, model_info, prepare
from adapld_cli.model.convert import MANIFEST, cache_state

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _byte_alphabet() -> list[str]:
    """GPT-2's byte -> printable-unicode table, in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    keep += range(ord("®"), ord("ÿ") + 1)
    table, extra = {b: chr(b) for b in keep}, 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def random_blocks(shape: tuple[int, ...], kind, rng) -> np.ndarray:
    """Random valid blocks of a GGUF quantized type for a ``shape`` (rows, k) tensor: K-quants
    by :func:`random_kquant`, the 32-input formats by ``gguf``'s own quantizer of random
    weights (every bit pattern of their values occurs)."""
    from gguf.quants import quantize

    if kind.name.endswith("_K"):
        return random_kquant(shape, kind, rng)
    return quantize((rng.standard_normal(shape) * 0.05).astype(np.float32), kind)


def random_kquant(shape: tuple[int, ...], kind, rng) -> np.ndarray:
    """Random valid Q4_K / Q5_K / Q6_K blocks for a ``shape`` (rows, k) tensor (the ``gguf``
    package cannot quantize to these types): random integers and 6-bit scales, small float16
    ``d``."""
    rows, k = shape
    size = {"Q4_K": 144, "Q5_K": 176, "Q6_K": 210}[kind.name]
    blocks = rng.integers(0, 256, (rows * k // 256, size), dtype=np.uint8)
    d = rng.uniform(2e-5, 6e-5, (len(blocks), 2)).astype(np.float16).view(np.uint8)
    if kind.name in ("Q4_K", "Q5_K"):
        blocks[:, 0:4] = d  # d, dmin
    else:
        blocks[:, 208:210] = d[:, 0:2]
    return blocks.reshape(rows, -1)


ARCHS = ("qwen2", "llama", "qwen3")  # GGUF architectures write_tiny_gguf can write


def write_tiny_gguf(
    path: Path,
    hidden: int = 32,
    heads: int = 4,
    kv: int = 2,
    ffn: int = 64,
    quant=None,
    arch: str = "qwen2",
):
    """A 1-layer GGUF of ``arch`` (:data:`ARCHS`: Qwen2 with q/k/v biases, Llama without,
    Qwen3 with per-head q/k norms), float32 except the tensors ``quant`` maps to a GGML type
    (K-quants get random blocks, see :func:`random_kquant`); returns its tensors by GGUF
    name (as float32: the values a reader dequantises). A Llama file's ``attn_q``/``attn_k``
    rows are random, so in whatever order the file holds them they are a valid model: the
    reader (transformers' Llama processor) puts them in its rotary layout."""
    import gguf
    from gguf.quants import dequantize, quantize

    assert arch in ARCHS, arch
    rng = np.random.default_rng(0)
    merges = ["Ġ t", "Ġ a", "e r"]
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokens = _byte_alphabet() + [m.replace(" ", "") for m in merges] + specials
    vocab, head_dim = len(tokens), hidden // heads
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(f"tiny-{arch}")
    writer.add_context_length(128)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(ffn)
    writer.add_block_count(1)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    if arch != "qwen2":
        writer.add_rope_dimension_count(head_dim)
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    writer.add_file_type(0)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * (vocab - 3) + [3, 3, 3])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(vocab - 3)
    writer.add_eos_token_id(vocab - 1)
    writer.add_pad_token_id(vocab - 3)
    writer.add_chat_template(TEMPLATE)
    shapes = {
        "token_embd.weight": (vocab, hidden),
        "blk.0.attn_norm.weight": (hidden,),
        "blk.0.attn_q.weight": (hidden, hidden),
        "blk.0.attn_q.bias": (hidden,),
        "blk.0.attn_k.weight": (kv * head_dim, hidden),
        "blk.0.attn_k.bias": (kv * head_dim,),
        "blk.0.attn_v.weight": (kv * head_dim, hidden),
        "blk.0.attn_v.bias": (kv * head_dim,),
        "blk.0.attn_q_norm.weight": (head_dim,),
        "blk.0.attn_k_norm.weight": (head_dim,),
        "blk.0.attn_output.weight": (hidden, hidden),
        "blk.0.ffn_norm.weight": (hidden,),
        "blk.0.ffn_gate.weight": (ffn, hidden),
        "blk.0.ffn_up.weight": (ffn, hidden),
        "blk.0.ffn_down.weight": (hidden, ffn),
        "output_norm.weight": (hidden,),
        "output.weight": (vocab, hidden),
    }
    if arch != "qwen2":
        shapes = {k: v for k, v in shapes.items() if not k.endswith(".bias")}
    if arch != "qwen3":
        shapes = {k: v for k, v in shapes.items() if "_norm." not in k or "attn_q" not in k}
        shapes = {k: v for k, v in shapes.items() if "attn_k_norm" not in k}
    tensors = {}
    for name, shape in shapes.items():
        tensors[name] = rng.standard_normal(shape) * 0.02 + 1.0 * name.endswith("norm.weight")
        tensors[name] = tensors[name].astype(np.float32)
        kind = (quant or {}).get(name)
        if kind is None:
            writer.add_tensor(name, tensors[name])
            continue
        packed = random_kquant(shape, kind, rng) if kind.name.endswith("_K") else None
        packed = quantize(tensors[name], kind) if packed is None else packed
        tensors[name] = dequantize(packed, kind).astype(np.float32)
        writer.add_tensor(name, packed, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return tensors


@pytest.fixture
def tiny_gguf(tmp_path) -> tuple[Path, dict]:
    path = tmp_path / "models" / "tiny-coder.gguf"
    path.parent.mkdir()
    return path, write_tiny_gguf(path)


def test_gguf_converts_once_and_faithfully(tiny_gguf, tmp_path, monkeypatch):
    monkeypatch.setenv("ADAPLD_KERNELS", "stock")  # plain nn.Linear weights to compare
    path, tensors = tiny_gguf
    loaded = load(str(path), device="cpu", dtype="float32")
    assert (loaded.source, loaded.name, loaded.dtype) == ("gguf", "tiny-coder.gguf", "float32")
    folder = Path(loaded.path)
    assert folder.parent == Path(os.environ["ADAPLD_HOME"]) / "models"
    manifest = json.loads((folder / MANIFEST).read_text())
    assert "model.safetensors" in manifest["files"] and "tokenizer.json" in manifest["files"]
    assert getattr(loaded.model.config, "quantization_config", None) is None
    # Same numbers as in the file.
    model = loaded.model
    assert np.array_equal(model.lm_head.weight.detach().numpy(), tensors["output.weight"])
    embed = model.model.embed_tokens.weight.detach().numpy()
    assert np.array_equal(embed, tensors["token_embd.weight"])
    q_bias = model.model.layers[0].self_attn.q_proj.bias.detach().numpy()
    assert np.array_equal(q_bias, tensors["blk.0.attn_q.bias"])
    # The tokenizer and chat template come from the same file.
    tok = loaded.tokenizer
    text = "def f(x):\n\treturn 'héllo ✓'  \n"
    assert tok.decode(tok.encode(text)) == text
    assert tok.chat_template == TEMPLATE and tok.eos_token == "<|im_end|>"
    # ... with its added tokens listed in the config (else each load parses tokenizer.json for
    # them), the same ones as in tokenizer.json, and a tokenizer made from the GGUF itself
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    added = json.loads((folder / "tokenizer.json").read_text())["added_tokens"]
    assert settings["added_tokens_decoder"] == {
        str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in added
    }
    from transformers import AutoTokenizer

    direct = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    chat = [{"role": "user", "content": text + "<|im_end|>"}]
    assert tok.encode(text + "<|im_start|>x") == direct.encode(text + "<|im_start|>x")
    assert tok.apply_chat_template(chat, tokenize=False) == direct.apply_chat_template(
        chat, tokenize=False
    )
    assert tok.added_tokens_decoder == direct.added_tokens_decoder
    # Second load: from the cache, not converted again.
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    again = load(str(path), device="cpu")
    assert again.path == loaded.path
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp
    info = model_info(str(path), device="cpu")
    assert (info["state"], info["path"], info["gguf"]) == ("ready", str(folder), str(path))
    # A changed file (new mtime) gets its own cache.
    os.utime(path, ns=(stamp, stamp + 10**9))
    assert model_info(str(path), device="cpu")["state"] == "needs prepare"
    assert prepare(str(path)) != folder


def test_concurrent_conversions_share_one_cache(tiny_gguf, tmp_path, monkeypatch):
    path, _ = tiny_gguf
    monkeypatch.setenv("ADAPLD_HOME", str(tmp_path / "home"))
    code = "from adapld_cli.model import prepare; import sys; print(prepare(sys.argv[1]))"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    assert results[0][0] == results[1][0]
    assert [err for _, err in results] == ["", ""]  # quiet when stderr is not a terminal
    folder = Path(results[0][0].strip())
    models = tmp_path / "home" / "models"
    assert sorted(p.name for p in models.iterdir()) == [folder.name, folder.name + ".lock"]
    source = json.loads((folder / MANIFEST).read_text())["source"]
    assert cache_state(folder, source) == "ready"


def test_not_a_gguf_is_a_clear_error(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"this is not a gguf file" * 10)
    with pytest.raises(ModelError, match="cannot load GGUF file"):
        load(str(bad), device="cpu")
    models = Path(os.environ["ADAPLD_HOME"]) / "models"
    assert not [p for p in models.iterdir() if p.name.endswith(".tmp")]


def test_quantized_gguf_is_stored_in_bfloat16_with_the_embedding_packed(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("ADAPLD_KERNELS", "stock")  # plain nn.Linear weights to compare
    from gguf import GGMLQuantizationType as Q
    from safetensors import safe_open

    from adapld_cli.model.convert import FORMAT, PACKED, WEIGHTS

    path = tmp_path / "quantized.gguf"
    quant = {
        "token_embd.weight": Q.Q8_0,
        "blk.0.attn_q.weight": Q.Q8_0,
        "blk.0.ffn_up.weight": Q.Q4_0,
        "output.weight": Q.F16,
    }
    tensors = write_tiny_gguf(path, quant=quant)
    loaded = load(str(path), device="cpu", dtype="float32")
    folder = Path(loaded.path)
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["format"] == FORMAT and {WEIGHTS, PACKED} <= set(manifest["files"])
    with safe_open(str(folder / WEIGHTS), framework="pt") as fh:
        dtypes = {k: fh.get_slice(k).get_dtype() for k in fh.keys()}  # noqa: SIM118
    assert "model.embed_tokens.weight" not in dtypes  # kept as GGUF blocks in PACKED
    assert dtypes["model.layers.0.self_attn.q_proj.weight"] == "BF16"  # quantised -> bfloat16
    assert dtypes["model.layers.0.mlp.up_proj.weight"] == "BF16"
    assert dtypes["lm_head.weight"] == "F16"  # float types are kept as they are
    assert dtypes["model.layers.0.self_attn.k_proj.weight"] == "F32"
    model = loaded.model

    def as_bf16(name):
        return torch.from_numpy(tensors[name]).to(torch.bfloat16).float()

    assert loaded.dtype == "float32"
    embed = model.model.embed_tokens.weight.detach()
    assert torch.equal(embed, torch.from_numpy(tensors["token_embd.weight"]))  # exact
    assert torch.equal(model.model.layers[0].self_attn.q_proj.weight.detach(),
                       as_bf16("blk.0.attn_q.weight"))  # fmt: skip
    assert torch.equal(model.model.layers[0].mlp.up_proj.weight.detach(),
                       as_bf16("blk.0.ffn_up.weight"))  # fmt: skip
    assert torch.equal(model.lm_head.weight.detach(),
                       torch.from_numpy(tensors["output.weight"]))  # fmt: skip
    # The same cache loads in bfloat16 too: every value rounded once from the dequantised one.
    half = load(str(path), device="cpu", dtype="bfloat16")
    assert half.path == loaded.path and half.dtype == "bfloat16"
    assert torch.equal(half.model.model.embed_tokens.weight.detach().float(),
                       as_bf16("token_embd.weight"))  # fmt: skip
    # The cache folder is also a complete local model.
    local = load(str(folder), device="cpu")
    assert torch.equal(local.model.model.embed_tokens.weight.detach(), embed)


def test_stream_writer_output_reads_back_even_when_the_header_outgrows_its_room(tmp_path):
    import torch
    from safetensors.torch import load_file

    from adapld_cli.model.safetensors_out import StreamWriter

    gen = torch.Generator().manual_seed(0)
    tensors = {
        f"model.layers.{i}.a.long.parameter.name.weight": torch.randn(3, i + 1, generator=gen)
        for i in range(80)
    }
    tensors["half"] = torch.randn(5, 7, generator=gen).to(torch.bfloat16)
    tensors["bytes"] = torch.arange(11, dtype=torch.uint8)
    for room in (1, len(tensors)):  # far too little header room, then enough
        out = tmp_path / f"room{room}.safetensors"
        writer = StreamWriter(out, room)
        for name, value in tensors.items():
            writer.add(name, value)
        writer.close({"note": "test"})
        back = load_file(str(out))
        assert back.keys() == tensors.keys()
        assert all(torch.equal(back[k], v) and back[k].dtype == v.dtype for k, v in tensors.items())
        assert not list(tmp_path.glob("*.rewrite"))
