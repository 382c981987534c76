"""Fewer kernels for a decoder's small ops on a GPU: fused RMSNorm, rotary embedding of the
queries and keys at once, one product for the queries, keys and values and one for the
MLP's gate and up projections.

Replayed as a CUDA graph, a static pass of a small model is mostly small kernels, each a
few microseconds however little it computes (a launch inside the graph, a wave of tiny
thread blocks): dozens a layer (counted on a CPU with a dispatch mode; docs/design.md, "Fused
small ops"). :func:`fuse` rewires a loaded model in place:

- **RMSNorm** (eight kernels: a cast to float32, square, mean, add, rsqrt, multiply, a cast
  back, the weight; twice a layer and once at the end): the modules it recognises run
  torch's ``rms_norm``, one fused kernel on CUDA. Not transformers' bits: the fused kernel
  applies the weight in float32 and rounds once, transformers rounds the normalised states
  to the model's dtype before the weight (so bfloat16 outputs can differ by a unit in the
  last place: docs/performance.md, "Figures behind code decisions"). Plain decoding, adapld
  and the bench's transformers baselines run the same modules, so they agree as before.
- **Rotary embedding** (five kernels for the queries, five for the keys): the family's
  ``apply_rotary_pos_emb`` over the queries and keys concatenated along the heads, six
  kernels; every element is computed by the same operations, so the values are
  transformers' bit for bit.
- **Products** (``q``/``k``/``v`` three, ``gate``/``up`` two): one product over the
  concatenated weights each, whose output the layer reads in parts (the separate modules'
  weights become views of the joint one: no second copy). A product of another width rounds
  otherwise (cuBLAS picks its kernel by shape), so not transformers' bits either.

On CUDA only (on a CPU the exact kernels and the lean forward keep the stock numbers and
their own work); ``ADAPLD_FUSED=0`` keeps transformers' forward (a measurement's other arm).
"""

from __future__ import annotations

import inspect
import os
import sys
import types
from typing import Any

ENV_FUSED = "ADAPLD_FUSED"
# RMSNorm classes whose forward is weight * (x * rsqrt(mean(x^2) + eps)) (Gemma's 1 + weight not)
NORMS = frozenset({"Qwen2RMSNorm", "Qwen3RMSNorm", "LlamaRMSNorm", "MistralRMSNorm"})
ROPE_PARAMS = ["q", "k", "cos", "sin", "unsqueeze_dim"]  # transformers 5's signature
# MLP classes whose forward is down(act(gate(x)) * up(x))
MLPS = frozenset({"Qwen2MLP", "Qwen3MLP", "LlamaMLP", "MistralMLP"})


def fuse(model: Any, device_type: str) -> tuple[int, int, int]:
    """On CUDA (unless ``ADAPLD_FUSED=0``): :func:`fuse_norms`, :func:`fuse_rope` and
    :func:`fuse_products`; returns what each rewired."""
    if device_type != "cuda" or os.environ.get(ENV_FUSED, "1") == "0":
        return 0, 0, 0
    return fuse_norms(model), fuse_rope(model), fuse_products(model)


def fuse_norms(model: Any) -> int:
    """Make every recognised RMSNorm module of ``model`` run torch's fused ``rms_norm``
    (where the input's dtype is the weight's); returns how many it rewired."""
    count = 0
    for module in model.modules():
        weight = getattr(module, "weight", None)
        known = type(module).__name__ in NORMS and hasattr(module, "variance_epsilon")
        one_dim = weight is not None and weight.dim() == 1
        if known and one_dim and "stock_forward" not in vars(module):
            module.stock_forward = module.forward
            module.forward = types.MethodType(_fused_norm, module)
            count += 1
    return count


def _fused_norm(self: Any, hidden_states: Any) -> Any:
    """An RMSNorm module's forward as one ``rms_norm`` call (its own forward where the input's
    dtype is not the weight's)."""
    import torch

    if hidden_states.dtype != self.weight.dtype:
        return self.stock_forward(hidden_states)
    return torch.nn.functional.rms_norm(
        hidden_states, self.weight.shape, self.weight, self.variance_epsilon
    )


def fuse_rope(model: Any) -> int:
    """Give the modeling modules of ``model``'s attention layers (Qwen2, Llama, ...: those with
    transformers 5's ``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim)``) the joint form
    :func:`joint_rope`; returns how many modules it rewired (process-wide: the values are the
    same)."""
    count = 0
    for name in {type(m).__module__ for m in model.modules() if hasattr(m, "q_proj")}:
        module = sys.modules.get(name)
        stock = getattr(module, "apply_rotary_pos_emb", None)
        if stock is None or getattr(stock, "stock", None) is not None:
            continue
        try:  # (with HF's ``kernels`` installed, transformers wraps it in a module)
            params = list(inspect.signature(getattr(stock, "forward", stock)).parameters)
        except (TypeError, ValueError):
            continue
        rotate_half = getattr(module, "rotate_half", None)
        if params == ROPE_PARAMS and callable(rotate_half):
            module.apply_rotary_pos_emb = _joint(stock, rotate_half)
            count += 1
    return count


def _joint(stock: Any, rotate_half: Any) -> Any:
    """:func:`joint_rope` with the family's ``rotate_half`` in the place of ``stock`` (kept as
    its ``stock`` attribute)."""

    def apply_rotary_pos_emb(q: Any, k: Any, cos: Any, sin: Any, unsqueeze_dim: int = 1) -> Any:
        return joint_rope(q, k, cos, sin, unsqueeze_dim, stock, rotate_half)

    apply_rotary_pos_emb.stock = stock  # type: ignore[attr-defined]
    return apply_rotary_pos_emb


def joint_rope(
    q: Any,
    k: Any,
    cos: Any,
    sin: Any,
    unsqueeze_dim: int,
    stock: Any,
    rotate_half: Any,
) -> tuple[Any, Any]:
    """transformers' ``apply_rotary_pos_emb`` (``(x * cos) + (rotate_half(x) * sin)`` for the
    queries ``q`` and the keys ``k``, heads along ``unsqueeze_dim``) over both at once, with
    the family's own ``rotate_half``: six kernels instead of ten, the same operations on every
    element. ``stock`` where the two do not concatenate (other dtypes or shapes)."""
    import torch

    d = unsqueeze_dim
    if q.dtype != k.dtype or q.shape[:d] != k.shape[:d] or q.shape[d + 1 :] != k.shape[d + 1 :]:
        return stock(q, k, cos, sin, unsqueeze_dim)
    qk = torch.cat((q, k), dim=d)
    cos, sin = cos.unsqueeze(d), sin.unsqueeze(d)
    out = (qk * cos) + (rotate_half(qk) * sin)
    return out.split((q.shape[d], k.shape[d]), dim=d)


def fuse_products(model: Any) -> int:
    """Give every attention module's ``q``/``k``/``v`` projections one product (:class:`Joint`)
    and every recognised MLP one product for its gate and up projections; returns how many
    modules it rewired."""
    count = 0
    for module in list(model.modules()):
        parts = [getattr(module, n, None) for n in ("q_proj", "k_proj", "v_proj")]
        if _joinable(parts):
            joint = Joint(parts)
            for i, part in enumerate(parts):
                part.forward = types.MethodType(_part_forward(joint, i, part.forward), part)
            count += 1
        gate_up = [getattr(module, n, None) for n in ("gate_proj", "up_proj")]
        if type(module).__name__ in MLPS and _joinable(gate_up) and gate_up[0].bias is None:
            module.joint = Joint(gate_up)
            module.forward = types.MethodType(_mlp_forward, module)
            count += 1
    return count


def _joinable(parts: list[Any]) -> bool:
    """Plain linear layers on one input, all with a bias or none, not joined yet."""
    import torch

    if not parts or any(type(p) is not torch.nn.Linear for p in parts):
        return False
    same = len({(p.in_features, p.weight.dtype, p.weight.device) for p in parts}) == 1
    biases = {p.bias is None for p in parts}
    return same and len(biases) == 1 and not any("joint_of" in vars(p) for p in parts)


class Joint:
    """One product for several linear layers on the same input: their weights (and biases)
    concatenated, each layer's own now a view of its rows."""

    def __init__(self, parts: list[Any]) -> None:
        import torch

        with torch.no_grad():
            self.weight = torch.cat([p.weight for p in parts])  # [sum(out), in]
            self.bias = None if parts[0].bias is None else torch.cat([p.bias for p in parts])
        self.sizes = [p.out_features for p in parts]
        start = 0
        for p, n in zip(parts, self.sizes, strict=True):
            p.weight = torch.nn.Parameter(self.weight[start : start + n], requires_grad=False)
            if self.bias is not None:
                p.bias = torch.nn.Parameter(self.bias[start : start + n], requires_grad=False)
            p.joint_of = self
            start += n
        self._input: Any = None  # the input of the last product, and its parts not yet read
        self._parts: list[Any] = []

    def __call__(self, x: Any) -> list[Any]:
        """Every part's output for ``x``: views of one product, ``[..., out_i]``."""
        import torch

        return list(torch.nn.functional.linear(x, self.weight, self.bias).split(self.sizes, -1))

    def part(self, i: int, x: Any) -> Any | None:
        """Part ``i`` of the product for ``x``: part 0 computes it (and keeps the others for
        the calls that follow on the same input), a later part takes what was kept, or None
        when ``x`` is another input (the caller computes it alone)."""
        if i == 0:
            parts = self(x)
            self._input, self._parts = x, parts
            return parts[0]
        if self._input is not x:
            return None
        out = self._parts[i]
        if i == len(self.sizes) - 1:  # the last part read: keep nothing
            self._input, self._parts = None, []
        return out


def _part_forward(joint: Joint, i: int, stock: Any) -> Any:
    def forward(self: Any, x: Any) -> Any:
        out = joint.part(i, x)
        return stock(x) if out is None else out

    return forward


def _mlp_forward(self: Any, x: Any) -> Any:
    """``down(act(gate(x)) * up(x))`` with the gate and up projections one product."""
    gate, up = self.joint(x)
    return self.down_proj(self.act_fn(gate) * up)
