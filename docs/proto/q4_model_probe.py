"""Measurement probe for issue 19 (not part of the package): the default model's Q4_K linears
on the prototype kernel ``mm_q`` of ``int4_gemm.py``, with the GGUF's own scales and mins.

Loads coder-1.5b as ``adapld`` does (bf16, exact kernels), re-reads its GGUF (assembled from
the installed parts into a temporary folder), replaces every Q4_K linear (168 of 197: the
Q6_K ``ffn_down``/``attn_v`` tensors and the LM head stay packed bf16) by ``QLinear``, then
prints whether a 65-node tree's rows equal single steps bit for bit, the cost curve
(``adapld bench --verify-cost``'s measurement, before and after, in one process) and, with
``cases``, greedy adapld on the six edit cases. Run from the repository root, alone on the machine:
``OMP_NUM_THREADS=2 python docs/proto/q4_model_probe.py [cases]``.
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2]))

import int4_gemm as kern  # noqa: E402

NAMES = {  # GGUF tensor -> module under model.model.layers[i]
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def q4k_parts(tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(q [N, K] 0..15, scale [N, K/32], min [N, K/32])`` of a Q4_K tensor, exactly:
    ``w = q * scale + min`` (``d * sc`` and ``-dmin * m`` in float32)."""
    from gguf.quants import Q4_K

    n, k = int(tensor.shape[1]), int(tensor.shape[0])  # GGUF shapes are [K, N]
    blocks = np.asarray(tensor.data).reshape(-1, 144)  # 256 weights per block
    d = blocks[:, 0:2].view(np.float16).astype(np.float32)
    dmin = blocks[:, 2:4].view(np.float16).astype(np.float32)
    sc, m = Q4_K.get_scale_min(blocks[:, 4:16])
    scale = torch.from_numpy((d * sc.astype(np.float32)).reshape(n, k // 32))
    mins = torch.from_numpy(-(dmin * m.astype(np.float32)).reshape(n, k // 32))
    shifts = np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    qs = blocks[:, 16:].reshape(-1, 4, 1, 32) >> shifts
    q = torch.from_numpy((qs & 0x0F).reshape(n, k).astype(np.int64))
    return q, scale, mins


class QLinear(torch.nn.Module):
    """A linear layer on ``mm_q``: bf16 in, bf16 out, batch-invariant for up to 128 rows."""

    def __init__(self, tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        q, scale, mins = q4k_parts(tensor)
        n, k = q.shape
        tiles = n // 16
        self.qp = kern.pack_pairs(q)  # [N/16, K/2, 16]

        def per_tile(a: torch.Tensor) -> torch.Tensor:
            return a.reshape(tiles, 16, -1).permute(0, 2, 1)

        self.sm = torch.stack([per_tile(scale), per_tile(mins)], 2).contiguous()
        self.bias, self.out_features, self.in_features = bias, n, k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1]).to(torch.bfloat16).contiguous()
        y = kern.ext.mm_q(x2, self.qp, self.sm, kern.group_sums(x2)).to(torch.bfloat16)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*shape[:-1], self.out_features)


def quantize(model, reader) -> int:
    """Replace the model's Q4_K linears by ``QLinear``; returns how many."""
    from gguf import GGMLQuantizationType

    count = 0
    for tensor in reader.tensors:
        match = re.match(r"blk\.(\d+)\.(\w+)\.weight$", tensor.name)
        if not match or tensor.tensor_type != GGMLQuantizationType.Q4_K:
            continue
        if match.group(2) not in NAMES:
            continue
        parent_name, child = NAMES[match.group(2)].split(".")
        parent = getattr(model.model.layers[int(match.group(1))], parent_name)
        setattr(parent, child, QLinear(tensor, getattr(parent, child).bias))
        count += 1
    return count


def edit_cases(tokenizer) -> list[tuple[str, list[int]]]:
    from adapld_cli.bench.tasks import load_tasks
    from adapld_cli.edit.prompt import build_prompt, load_template

    out = []
    for task in load_tasks("adapld_cli/bench/edit_cases.jsonl"):
        prompt = build_prompt(
            load_template(),
            tokenizer,
            code=task.before,
            instruction=task.instruction,
            filename=task.filename,
            lang="python",
        )
        out.append((task.name, prompt.ids))
    return out


def main() -> None:
    from gguf import GGUFReader

    from adapld_cli.bench.verify_cost import format_curve, measure
    from adapld_cli.edit.session import stop_token_ids
    from adapld_cli.engine import GenerationConfig, generate
    from adapld_cli.model.assemble import assemble, locate_embedded_parts, reinstall_hint
    from adapld_cli.model.loader import embedded_model, load
    from tests.test_kernels import dfs_tree, tree_vs_sequential

    torch.set_num_threads(2)
    loaded = load("coder-1.5b", device="cpu")
    model = loaded.model
    print(format_curve(measure(model), "packed bf16 (today), same process"), flush=True)
    spec = embedded_model("coder-1.5b")
    with tempfile.TemporaryDirectory() as tmp:
        gguf = Path(tmp) / "model.gguf"
        assemble(
            locate_embedded_parts(spec),
            gguf,
            size=spec.size,
            sha256=spec.sha256,
            hint=reinstall_hint(spec),
            progress=False,
        )
        print("Q4_K linears on mm_q:", quantize(model, GGUFReader(str(gguf))))
    gen = torch.Generator().manual_seed(2)
    prefix = torch.randint(0, 20000, (300,), generator=gen).tolist()
    tokens = torch.randint(0, 20000, (65,), generator=gen).tolist()
    equal = tree_vs_sequential(model, prefix, tokens, dfs_tree(65, 0))
    print("65-node tree rows equal to single steps:", equal)
    print(format_curve(measure(model), "mm_q (Q4_K) + packed bf16 (Q6_K, LM head)"), flush=True)
    if "cases" not in sys.argv:
        return
    stops = stop_token_ids(loaded)
    for name, ids in edit_cases(loaded.tokenizer):
        t0 = time.perf_counter()
        out = generate(model, ids, GenerationConfig(max_new_tokens=1200, stop_token_ids=stops))
        s = out.stats
        print(
            f"{name}: {s.new_tokens} tokens, prefill {s.prefill_s:.1f} s,"
            f" decode {s.decode_s:.1f} s, e2e {s.new_tokens / (time.perf_counter() - t0):.1f}"
            f" tok/s, T {s.mean_accepted:.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
