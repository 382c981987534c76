"""Fast, batch-invariant CPU kernels for a loaded causal LM.

Contract: :func:`apply` rewires a Hugging Face model in place, once, right after loading, so
that on a CPU (float32 or bfloat16; bfloat16 linears compute in float32 where oneDNN has no
bfloat16 kernels, as on AVX2):

- every ``nn.Linear`` (the LM head included) and GPT-2's ``Conv1D`` (a linear layer stored
  transposed) runs oneDNN with weights reordered once
  (``torch.ops.mkldnn._reorder_linear_weight`` + ``_linear_pointwise``). Torch's default
  ``F.linear`` runs a 2- or 3-row input as separate matrix-vector products, so a small
  verification pass costs several single steps; prepacked, far less (docs/performance.md,
  "Figures behind code decisions").
- the forward is *batch-invariant*: a row's result does not depend on how many rows share
  the pass. oneDNN's result for a row is bitwise independent of the number of rows while the
  reduced dimension is at most :data:`K_CHUNK` (for every pass size up to
  :data:`EXACT_MAX_QUERIES` rows on AVX-512 CPUs, in float32 on AVX2 too: docs/design.md,
  "Numerical facts the tests rely on"; longer reductions are blocked differently for
  different M), so a
  wider layer (the MLP's down projection, 4,864 inputs) is summed from fixed chunks in a
  fixed order. On CPUs with AMX tiles, oneDNN's bfloat16 products block long reductions
  differently past :data:`AMX_ROW_BLOCK` rows (docs/design.md, "AMX breaks oneDNN's bfloat16
  invariance past 32 rows"), so there a pass of up to :data:`EXACT_MAX_QUERIES` rows runs in
  fixed blocks of :data:`AMX_ROW_BLOCK` rows, each bit for bit what its rows get alone.
  Attention runs each query exactly as a single-token decode step would
  (:func:`exact_attention`).
  RMSNorm, RoPE, SiLU and residual adds are per row already.
  Hence a draft-tree pass computes every node's logits bit for bit as plain decoding does,
  in any dtype: greedy speculative decoding is then exactly plain greedy decoding, with no
  near-tie flips.

Modes (``$ADAPLD_KERNELS``, or the ``mode`` argument): ``exact`` (default: prepacked linears
+ batch-invariant attention; the loader then installs :mod:`adapld_cli.model.lean`'s
forward on top, bit for bit the same values with less host work), ``packed`` (prepacked
linears, stock attention), ``stock`` (leave the model alone, for comparisons). Anything
other than a CPU model in float32 or bfloat16 (float64 test models, float16, CUDA, MPS, a
torch without oneDNN) is left alone.
Tied embeddings keep working: the embedding keeps its weight, the LM head gets a packed copy.
Linears already on the quantized kernels (:mod:`adapld_cli.model.quant`, batch-invariant
too) are left as they are.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

ENV_KERNELS = "ADAPLD_KERNELS"
MODES = ("exact", "packed", "stock")
ATTENTION = "adapld_exact"  # name registered with transformers' AttentionInterface
K_CHUNK = 1024  # longest reduction oneDNN keeps batch-invariant (see module docstring)
EXACT_MAX_QUERIES = 128  # passes up to this many tokens are batch-invariant; longer ones
# (prefill chunks, identical for every decoding method) use the stock attention
AMX_ROW_BLOCK = 32  # most rows oneDNN's AMX bfloat16 products keep batch-invariant


def resolve_mode(mode: str | None = None) -> str:
    """``mode``, else ``$ADAPLD_KERNELS``, else ``"exact"``; raises ``ValueError`` if unknown."""
    name = (mode or os.environ.get(ENV_KERNELS, "") or "exact").strip().lower()
    if name not in MODES:
        raise ValueError(f"{ENV_KERNELS}={name!r}: use one of {', '.join(MODES)}")
    return name


def supported(model: Any) -> str | None:
    """Why :func:`apply` would leave ``model`` alone (one line), or None if it can run."""
    import torch

    params = list(model.parameters())
    if not params:
        return "no parameters"
    if any(p.device.type != "cpu" for p in params):
        return "not on the CPU"
    dtype = params[0].dtype
    if dtype not in (torch.float32, torch.bfloat16):
        return f"{str(dtype).removeprefix('torch.')} is not float32/bfloat16"
    if not torch.backends.mkldnn.is_available():
        return "torch built without oneDNN"
    ops = torch.ops.mkldnn
    if not (hasattr(ops, "_reorder_linear_weight") and hasattr(ops, "_linear_pointwise")):
        return "oneDNN linear ops missing"
    return None


def apply(model: Any, mode: str | None = None) -> str:
    """Install the kernels of ``mode`` (see :func:`resolve_mode`) on ``model`` in place.

    Returns the mode in effect: ``"stock"`` when off or unsupported (see :func:`supported`).
    Idempotent. Sets ``model.adapld_kernels`` to the returned mode and, in ``exact`` mode,
    ``model.adapld_exact_rows`` to :data:`EXACT_MAX_QUERIES`: the widest pass whose every row
    is bit for bit a single step's (the runner prefills in chunks of at most that many, so a
    prompt's cache rows are the ones decoding it token by token would write).
    """
    name = resolve_mode(mode)
    current = getattr(model, "adapld_kernels", "stock")
    if current != "stock":
        return current
    if name != "stock" and supported(model) is None:
        pack_linears(model)
        if name == "exact":
            use_exact_attention(model)
            model.adapld_exact_rows = EXACT_MAX_QUERIES
    else:
        name = "stock"
    model.adapld_kernels = name
    return name


# ----------------------------------------------------------------------------- linear layers


def _packed_linear_class() -> type:
    import torch

    class PackedLinear(torch.nn.Module):
        """``nn.Linear`` with oneDNN-prepacked weights, batch-invariant (module docstring).

        ``x [..., in_features] -> [..., out_features]`` in the weight's dtype. Inputs wider
        than :data:`K_CHUNK` are reduced in fixed chunks, summed in float32 in chunk order.
        bfloat16 weights on a CPU without oneDNN bfloat16 (AVX2) are packed and computed in
        float32 (:func:`compute_dtype`), the output rounded to bfloat16 once. Passes of
        up to :data:`EXACT_MAX_QUERIES` rows run in blocks of :func:`row_block` rows
        (AMX: longer passes, prefill chunks, need no invariance and run whole).
        """

        def __init__(self, linear: torch.nn.Module) -> None:
            super().__init__()
            w = linear.weight.detach()  # [out, in]; a Conv1D stores [in, out]
            if not isinstance(linear, torch.nn.Linear):
                w = w.t()
            self.out_features, self.in_features = w.shape
            self.dtype = w.dtype
            self.compute = compute_dtype(w.dtype)
            self.bias = None if linear.bias is None else linear.bias.detach().clone()
            self.rows = row_block(self.compute)  # [M, in] blocks of a pass; 0 = whole
            self.chunks: list[tuple[int, int, torch.Tensor]] = []  # (start, end, packed)
            for s in range(0, self.in_features, K_CHUNK):
                e = min(s + K_CHUNK, self.in_features)
                part = w[:, s:e].to(self.compute).contiguous()
                self.chunks.append((s, e, torch.ops.mkldnn._reorder_linear_weight(part, 16)))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            shape = x.shape
            x2 = x.reshape(-1, shape[-1]).to(self.compute)  # [M, in]
            m, rows = x2.shape[0], self.rows
            if rows and rows < m <= EXACT_MAX_QUERIES:
                y = torch.cat([self._product(x2[i : i + rows]) for i in range(0, m, rows)])
            else:
                y = self._product(x2)
            return y.reshape(*shape[:-1], self.out_features)

        def _product(self, x2: torch.Tensor) -> torch.Tensor:
            """``x2 [M, in]`` (compute dtype) -> ``[M, out]`` in the weight's dtype."""
            run = torch.ops.mkldnn._linear_pointwise
            if len(self.chunks) == 1:
                bias = None if self.bias is None else self.bias.to(self.compute)
                y = run(x2.contiguous(), self.chunks[0][2], bias, "none", [], "")
            else:
                acc = None  # [M, out] float32
                for s, e, w in self.chunks:
                    part = run(x2[:, s:e].contiguous(), w, None, "none", [], "").float()
                    acc = part if acc is None else acc.add_(part)
                if self.bias is not None:
                    acc.add_(self.bias.float())
                y = acc.to(self.dtype)
            return y.to(self.dtype)

        def extra_repr(self) -> str:
            return (
                f"in_features={self.in_features}, out_features={self.out_features}, "
                f"chunks={len(self.chunks)}, dtype={str(self.dtype).removeprefix('torch.')}"
            )

    return PackedLinear


def compute_dtype(dtype: Any) -> Any:
    """The dtype a ``PackedLinear`` of ``dtype`` weights computes in: float32 for bfloat16
    where oneDNN has no bfloat16 kernels on this CPU (AVX2: its float32 products are
    batch-invariant too, docs/design.md, "The AVX2 build"), else ``dtype`` itself."""
    import torch

    if dtype == torch.bfloat16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return torch.float32
    return dtype


def row_block(compute: Any) -> int:
    """The rows a ``PackedLinear`` computing in ``compute`` runs a pass in (0 = the whole
    pass at once): :data:`AMX_ROW_BLOCK` for bfloat16 on a CPU with AMX tiles (or where torch
    cannot say), else 0 (oneDNN's AVX-512 and AVX2 kernels are batch-invariant for passes
    up to :data:`EXACT_MAX_QUERIES` rows: docs/design.md, "Numerical facts the tests rely
    on")."""
    import torch

    if compute != torch.bfloat16:
        return 0
    return AMX_ROW_BLOCK if has_amx() is not False else 0


def has_amx() -> bool | None:
    """Whether this CPU has AMX tiles, as torch sees it (None where torch cannot say)."""
    import torch

    probe = getattr(torch.cpu, "_is_amx_tile_supported", None)
    return None if probe is None else bool(probe())


_PACKED: type | None = None


def packed_linear_class() -> type:
    """The ``PackedLinear`` module class (defined on first use: keeps torch out of imports)."""
    global _PACKED
    if _PACKED is None:
        _PACKED = _packed_linear_class()
    return _PACKED


def pack_linears(model: Any) -> int:
    """Replace every ``nn.Linear`` (and ``Conv1D``) of ``model`` by a ``PackedLinear``;
    returns how many.

    The replaced layers' weights are dropped (except a tied LM head's, which the embedding
    still owns), so memory grows only by the packed copy of a tied head.
    """
    import torch
    from transformers.pytorch_utils import Conv1D

    cls = packed_linear_class()
    count = 0
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, (torch.nn.Linear, Conv1D)):
                setattr(module, name, cls(child))
                count += 1
    return count


# ----------------------------------------------------------------------------- attention


def use_exact_attention(model: Any) -> None:
    """Register :func:`exact_attention` with transformers and switch ``model`` to it."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    _native_attention()  # build (or rule out) the native kernel now, not inside a pass
    AttentionInterface.register(ATTENTION, exact_attention)
    # padding masks are built as for sdpa; a plain causal pass gets None
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION, sdpa_mask)
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(ATTENTION)
    else:  # pragma: no cover - older transformers
        model.config._attn_implementation = ATTENTION


class _Plans:
    """Per-query key plans, derived once per forward pass: every layer receives the same
    mask object (or one of two: full and sliding-window layers), so the plan is keyed on it
    (weakly), on the pass shape and on the window; the last two are kept. With the native
    kernel the plan is its ``(prefix, ptr, extra)`` tensors (:func:`native_plan`); with a
    window, :func:`window_groups` of it."""

    def __init__(self) -> None:
        self._kept: list[tuple[tuple[Any, ...], Any]] = []  # (key, plan), newest first

    def get(
        self, mask: Any, n: int, s: int, native: bool = False, window: int | None = None
    ) -> Any:
        for key, plan in self._kept:
            old_ref, rest = key[0], key[1:]
            same = (old_ref is None and mask is None) or (
                old_ref is not None and mask is not None and old_ref() is mask
            )
            if same and rest == (n, s, native, window):
                return plan
        plan = query_plan(mask, n, s)
        if native and plan is not None:
            plan = native_plan(mask, n, s)
        if window and plan is not None:
            plan = window_groups(plan, window) if native else window_plan(plan, window)
        ref = None if mask is None else weakref.ref(mask)
        self._kept = [((ref, n, s, native, window), plan), *self._kept[:1]]
        return plan


_plans = _Plans()


def window_plan(plan: list[Any], window: int) -> list[Any]:
    """:func:`query_plan`'s plan for a sliding-window layer: each query attends the last
    ``window`` keys of its sequence. A query's keys are one per position up to its own (the
    cache's prefix, then its tree ancestors and itself), so the last ``window`` of them are
    those within the window of its position, as transformers' sliding-window mask has it."""
    import torch

    out: list[Any] = []
    for sel in plan:
        if isinstance(sel, int):
            out.append(sel if sel <= window else torch.arange(sel - window, sel))
        else:
            out.append(sel[-window:])
    return out


def window_groups(plan: tuple[Any, Any, Any], window: int) -> list[tuple[Any, int, Any, Any, Any]]:
    """:func:`native_plan`'s plan for a sliding-window layer (see :func:`window_plan`), as
    groups ``(rows, start, prefix, ptr, extra)``: the queries ``rows`` attend, in a cache
    sliced from row ``start``, keys ``0..prefix-1`` then their ``extra`` (indices from
    ``start``). A query's kept keys go to the prefix as far as they are one contiguous run
    (also where a mask already dropped the keys before the window), so a single step and a
    tree node over the same keys get the same plan form."""
    import torch

    prefix, ptr, extra = plan
    groups: dict[int, list[tuple[int, int, Any]]] = {}
    for i in range(len(prefix)):
        p = int(prefix[i])
        keys = extra[int(ptr[i]) : int(ptr[i + 1])]
        drop = max(0, p + len(keys) - window)
        start, run = (drop, p - drop) if drop <= p else (0, 0)
        if drop > p:
            keys = keys[drop - p :]
        if run == 0 and len(keys):  # the kept keys open with a run: that is the prefix
            start = int(keys[0])
            steps = torch.nonzero(keys - torch.arange(start, start + len(keys)))
            run = int(steps[0, 0]) if len(steps) else len(keys)
            keys = keys[run:]
        groups.setdefault(start, []).append((i, run, keys - start))
    out = []
    for start, items in groups.items():
        counts = torch.tensor([len(k) for _, _, k in items], dtype=torch.long)
        ptr_g = torch.zeros(len(items) + 1, dtype=torch.long)
        ptr_g[1:] = counts.cumsum(0)
        out.append(
            (
                torch.tensor([i for i, _, _ in items], dtype=torch.long),
                start,
                torch.tensor([r for _, r, _ in items], dtype=torch.long),
                ptr_g,
                torch.cat([k for _, _, k in items]).contiguous(),
            )
        )
    return out


def query_plan(mask: Any, n: int, s: int) -> list[Any] | None:
    """For each of ``n`` queries over ``s`` keys: an ``int`` ``L`` (it attends keys
    ``0..L-1``) or a ``LongTensor`` of the key indices it attends (tree branches).

    ``mask`` is None (causal: the queries are the last ``n`` keys), a 4D bool mask (True =
    attend) or a 4D additive float mask (0 = attend, very negative = blocked) of shape
    ``[1, 1, n, s]``. Returns None for masks this cannot express (other shapes, soft biases).
    """
    import torch

    if mask is None:
        return [s - n + i + 1 for i in range(n)]
    if mask.dim() != 4 or mask.shape[0] != 1 or mask.shape[1] != 1 or mask.shape[-2:] != (n, s):
        return None
    m = mask[0, 0]
    if m.dtype == torch.bool:
        allowed = m
    else:
        allowed = m == 0
        blocked = m <= torch.finfo(m.dtype).min / 2
        if not bool((allowed | blocked).all()):
            return None
    counts = allowed.sum(-1).tolist()  # [n]
    prefix = allowed.int().cumprod(-1).sum(-1).tolist()  # length of each row's leading run
    plan: list[Any] = []
    for i in range(n):
        if counts[i] == 0:
            return None
        plan.append(counts[i] if prefix[i] == counts[i] else allowed[i].nonzero()[:, 0])
    return plan


def native_plan(mask: Any, n: int, s: int) -> tuple[Any, Any, Any]:
    """The native kernel's form of :func:`query_plan` (for a mask it accepts): query ``i``
    attends keys ``0..prefix[i]-1``, then ``extra[ptr[i]:ptr[i+1]]`` (int64 tensors)."""
    import torch

    if mask is None:
        prefix = torch.arange(s - n + 1, s + 1)
        return prefix, torch.zeros(n + 1, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    m = mask[0, 0]
    allowed = m if m.dtype == torch.bool else m == 0  # [n, s]
    prefix = allowed.int().cumprod(-1).sum(-1).long()  # leading run of each row
    rest = allowed & (torch.arange(s)[None, :] >= prefix[:, None])
    ptr = torch.zeros(n + 1, dtype=torch.long)
    ptr[1:] = rest.sum(-1).cumsum(0)
    return prefix, ptr, rest.nonzero()[:, 1].contiguous()  # row-major: rows in order


_NATIVE: Any = None  # the built native kernels while the exact attention uses them


def _native_attention() -> Any:
    """The native attention kernel (``qmm.cpp``), built on first use, or None where it
    cannot be built here (then the per-query torch ops below run: also exact, slower).
    Decided once per process, so every pass of a generation takes the same path."""
    global _NATIVE
    if _NATIVE is None:
        from adapld_cli.model import quant

        try:
            _NATIVE = quant.extension()
        except RuntimeError:
            _NATIVE = False
    return _NATIVE or None


def _head_rows(key: Any, value: Any) -> tuple[Any, Any]:
    """``key``/``value`` ``[KV, s, d]`` as the native kernel takes them: each head's rows
    contiguous, both heads the same distance apart (views of a preallocated cache are used as
    they are; anything else is copied)."""
    d = key.shape[-1]

    def rows(t: Any) -> bool:
        return t.stride(-1) == 1 and t.stride(-2) == d

    if rows(key) and rows(value) and key.stride(0) == value.stride(0):
        return key, value
    return key.contiguous(), value.contiguous()


def exact_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """Attention whose per-query result does not depend on how many queries share the pass.

    Shapes as transformers' attention interface: ``query [1, H, n, d]``, ``key`` / ``value``
    ``[1, KV, s, d]`` (cache included), output ``[1, n, H, d]``. Each query runs the very ops
    of a single-token step with the same shapes: scores over exactly the keys it attends
    (a prefix slice of the cache, or a gather for a tree branch), softmax, weighted sum, all
    in float32 for half-precision models (one rounding of the output). A sliding-window
    layer (``sliding_window``) attends the last ``window`` keys of each query's sequence
    (:func:`window_plan`), whatever mask the pass got (a draft tree's mask has no window).
    Batches, long passes (over :data:`EXACT_MAX_QUERIES`), soft-capping and non-binary masks
    fall back to transformers' sdpa attention.
    """
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    b, h, n, d = query.shape
    kv, s = key.shape[1], key.shape[2]
    plan = None
    native = _native_attention() if key.dtype in (torch.float32, torch.bfloat16) else None
    window = kwargs.get("sliding_window") or None
    if (
        b == 1
        and n <= EXACT_MAX_QUERIES
        and h % kv == 0
        and kwargs.get("softcap") is None
        and not getattr(module, "training", False)
    ):
        plan = _plans.get(attention_mask, n, s, native is not None, window)
    if plan is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    scale = d**-0.5 if scaling is None else scaling
    if native is not None:  # [n, H, d] float32 queries, scaled once
        q = (query[0].float() * scale).transpose(0, 1).contiguous()
        keys, values = _head_rows(key[0], value[0])
        if window is None:
            out = native.attention(q, keys, values, *plan)
        else:  # a call per slice of the cache (window_groups)
            out = torch.empty_like(q)
            for rows, start, *sub in plan:
                part = q if len(rows) == n else q.index_select(0, rows)
                got = native.attention(part, keys[:, start:], values[:, start:], *sub)
                out.index_copy_(0, rows, got)
        return out.unsqueeze(0).to(query.dtype), None
    g = h // kv
    # half-precision matmuls of these tiny shapes cost more in dispatch than in arithmetic:
    # run them in float32 (bf16 products are exact in float32), round the output once
    work = torch.float32 if query.dtype in (torch.bfloat16, torch.float16) else query.dtype
    out = torch.empty(1, n, kv, g, d, dtype=work, device=query.device)
    keys, values = key[0].to(work), value[0].to(work)  # [KV, s, d]
    keys_t = keys.transpose(1, 2)  # [KV, d, s]
    # per query [KV, G, d], scaled once (a query's rows never mix with another's)
    queries = (query[0].to(work) * scale).transpose(0, 1).reshape(n, kv, g, d).contiguous()
    for i, sel in enumerate(plan):
        if isinstance(sel, int):
            k_t, v = keys_t[:, :, :sel], values[:, :sel]  # [KV, d, L], [KV, L, d]
        else:
            k_t, v = keys.index_select(1, sel).transpose(1, 2), values.index_select(1, sel)
        probs = torch.softmax(torch.matmul(queries[i], k_t), dim=-1)  # [KV, G, L]
        torch.matmul(probs, v, out=out[0, i])  # [KV, G, d]
    out = out.view(1, n, h, d)
    return out.to(query.dtype), None
