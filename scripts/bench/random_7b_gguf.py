"""Write a Qwen2.5-7B-shaped Q4_K_M GGUF with random weights, for timing only.

    python scripts/bench/random_7b_gguf.py SOURCE.gguf OUT.gguf

SOURCE is a Qwen2 Q4_K_M GGUF (the default model's, e.g. assembled with `llama-gguf-split`
or from its installed parts): its metadata (tokenizer, chat template) and each tensor's
quantization type are copied; the dimensions become Qwen2.5-7B's (hidden 3,584, FFN 18,944,
28 layers, 28 query and 4 key-value heads) and the blocks are random but valid (every
super-block's scales `d`/`dmin` a small float16, so activations stay finite). The file is
the real 7B Q4_K_M's size (4.68 GB). The kernels' speed does not depend on the values, so
`adapld bench --verify-cost --model OUT.gguf` and `llama-bench -m OUT.gguf` time what a real
7B would; what it generates is noise. Not in CI. Figures: docs/models.md, "A 7B".
"""

from __future__ import annotations

import sys

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFValueType, GGUFWriter

HIDDEN, FFN, LAYERS, HEADS, KV_HEADS = 3584, 18944, 28, 28, 4
KV = KV_HEADS * (HIDDEN // HEADS)
BLOCK = {Q.Q4_K: 144, Q.Q6_K: 210}  # bytes per 256 weights
LINEAR = {
    "attn_q": (HIDDEN, HIDDEN),
    "attn_k": (KV, HIDDEN),
    "attn_v": (KV, HIDDEN),
    "attn_output": (HIDDEN, HIDDEN),
    "ffn_gate": (FFN, HIDDEN),
    "ffn_up": (FFN, HIDDEN),
    "ffn_down": (HIDDEN, FFN),
}
VECTOR = {"attn_norm": HIDDEN, "ffn_norm": HIDDEN, "attn_q": HIDDEN, "attn_k": KV, "attn_v": KV}


def _blocks(rng: np.random.Generator, kind: Q, rows: int, cols: int) -> np.ndarray:
    """Random super-blocks [rows, cols / 256 * bytes] with a small float16 scale."""
    scale = np.array([2e-4], np.float16).view(np.uint8)
    b = rng.integers(0, 256, (rows, cols // 256, BLOCK[kind]), dtype=np.uint8)
    if kind == Q.Q4_K:
        b[..., 0:2] = scale  # d
        b[..., 2:4] = scale  # dmin
    else:
        b[..., 208:210] = scale  # d
    return b.reshape(rows, -1)


def main(source: str, out: str) -> None:
    src = GGUFReader(source)
    dims = {
        "qwen2.embedding_length": HIDDEN,
        "qwen2.feed_forward_length": FFN,
        "qwen2.block_count": LAYERS,
        "qwen2.attention.head_count": HEADS,
        "qwen2.attention.head_count_kv": KV_HEADS,
        "general.name": "random-7b-shape",
    }
    w = GGUFWriter(out, "qwen2")
    for name, f in src.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vt = f.types[0]
        sub = f.types[-1] if vt == GGUFValueType.ARRAY else None
        w.add_key_value(name, dims.get(name, f.contents()), vt, sub_type=sub)
    rng = np.random.default_rng(0)
    for t in src.tensors:
        n, kind = t.name, t.tensor_type
        if n == "output_norm.weight":
            w.add_tensor(n, np.ones(HIDDEN, np.float32))
            continue
        if n in ("token_embd.weight", "output.weight"):
            rows, cols = int(t.shape[-1]), HIDDEN
        else:
            part = n.split(".")[2]
            if kind == Q.F32:
                v = rng.standard_normal(VECTOR[part]) * 0.02 + (1.0 if "norm" in part else 0.0)
                w.add_tensor(n, v.astype(np.float32))
                continue
            rows, cols = LINEAR[part]
        w.add_tensor(n, _blocks(rng, kind, rows, cols), raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
    w.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
