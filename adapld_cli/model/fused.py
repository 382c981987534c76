"""Fewer kernels for a decoder's small ops on a GPU: fused RMSNorm.

Replayed as a CUDA graph, a static pass of a small model is mostly small kernels, each a
few microseconds however little it computes (a launch inside the graph, a wave of tiny
thread blocks): transformers' RMSNorm is eight of them (a cast to float32, square, mean,
add, rsqrt, multiply, a cast back, the weight), twice a layer and once at the end, ~450 of
the ~1,400 kernels of a coder-1.5b pass (counted on a CPU with a dispatch mode;
docs/design.md, "Fused norms"). :func:`fuse_norms` gives the RMSNorm modules it recognises
torch's own ``rms_norm`` (one fused kernel on CUDA) as their forward, in place.

The values are not transformers' bit for bit: the fused kernel normalises and applies the
weight in float32 and rounds once, transformers rounds the normalised states to the model's
dtype before the weight (on this CPU a quarter of a bfloat16 norm's outputs differed by a
unit in the last place). Plain decoding and adapld run the same forward, so they agree as
before; the bench's transformers baselines run on the same model object, so with it too.
On CUDA only (on a CPU the exact kernels and the lean forward keep the stock numbers);
``ADAPLD_FUSED_NORMS=0`` keeps transformers' forward (a measurement's other arm).
"""

from __future__ import annotations

import os
import types
from typing import Any

ENV_FUSED_NORMS = "ADAPLD_FUSED_NORMS"
# RMSNorm classes whose forward is weight * (x * rsqrt(mean(x^2) + eps)) (Gemma's 1 + weight not)
NORMS = frozenset({"Qwen2RMSNorm", "Qwen3RMSNorm", "LlamaRMSNorm", "MistralRMSNorm"})


def fuse_norms(model: Any, device_type: str) -> int:
    """On CUDA (unless ``ADAPLD_FUSED_NORMS=0``), make every recognised RMSNorm module of
    ``model`` run torch's fused ``rms_norm``; returns how many (0: none, or not on CUDA)."""
    if device_type != "cuda" or os.environ.get(ENV_FUSED_NORMS, "1") == "0":
        return 0
    count = 0
    for module in model.modules():
        weight = getattr(module, "weight", None)
        known = type(module).__name__ in NORMS and hasattr(module, "variance_epsilon")
        one_dim = weight is not None and weight.dim() == 1
        if known and one_dim and "stock_forward" not in vars(module):
            module.stock_forward = module.forward
            module.forward = types.MethodType(_fused_forward, module)
            count += 1
    return count


def _fused_forward(self: Any, hidden_states: Any) -> Any:
    """An RMSNorm module's forward as one ``rms_norm`` call (its own forward where the input's
    dtype is not the weight's)."""
    import torch

    if hidden_states.dtype != self.weight.dtype:
        return self.stock_forward(hidden_states)
    return torch.nn.functional.rms_norm(
        hidden_states, self.weight.shape, self.weight, self.variance_epsilon
    )
