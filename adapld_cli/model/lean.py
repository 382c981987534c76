"""A lean forward for Llama-family decoders on the exact CPU kernels: the same numbers, less
host work per pass.

On a CPU a single decoding step spends a large part of its time in serial host work between
the int8 products: transformers' module calls, keyword plumbing, mask helpers, three
projections where one would do, each quantizing the same input again (the second thread
spins meanwhile; docs/design.md, "The lean forward"; docs/performance.md, "Run H").
:func:`install` rewires a loaded model in place, once:

- **Fused projections.** A layer's ``q``/``k``/``v`` projections (and ``gate``/``up``) that are
  :class:`~adapld_cli.model.quant.QuantLinear` layers with int8 inputs become one kernel call
  per run of one kind over all their weights, read where they are (no copy): the input is
  quantized once per call and one parallel region runs instead of three. ``qmm.cpp``
  computes each 16-column tile on its own from the same quantized input rows, so every
  output value is bit for bit the separate call's.
- **A lean layer forward** (passes of at most :data:`~adapld_cli.model.kernels.EXACT_MAX_QUERIES`
  tokens, the decoding passes): transformers' own pieces called directly (the RMSNorm
  modules' forward, the family's ``apply_rotary_pos_emb``, the MLP's activation), the
  residual adds as the layer writes them, the cache written in place and the native exact
  attention called directly. Where every linear of a layer takes int8 inputs, ``qmm.cpp``'s
  ``DecodeLayer`` runs the whole layer in two native calls instead (:func:`native_layer`).
  Longer passes (prefill chunks) run the stock layer. Hence the outputs, and every figure
  measured before, are unchanged bit for bit; tests compare the two forwards on tiny models
  of both families.
- **A lean base forward** for those passes: embeddings, rotary tables, the layers (module
  calls, so forward hooks fire), the final norm; the 4D mask is passed through as
  transformers would (it returns a prepared 4D mask as it is).

Only what it recognises is rewired (:func:`reason` says why not): a Qwen2, Qwen3 or Llama causal LM
on the CPU with the ``exact`` kernels and the native attention, full attention in every
layer, SiLU MLPs. Anything else keeps transformers' forward. ``$ADAPLD_LEAN=0`` turns it off
(comparisons).
"""

from __future__ import annotations

import os
import types
from typing import Any

ENV_LEAN = "ADAPLD_LEAN"
FAMILIES = ("qwen2", "qwen3", "llama")


def enabled() -> bool:
    """False when ``$ADAPLD_LEAN`` is ``0``/``off``/``no``/``false``."""
    return os.environ.get(ENV_LEAN, "1").strip().lower() not in ("0", "off", "no", "false")


def reason(model: Any) -> str | None:
    """Why :func:`install` would leave ``model`` alone (one line), or None."""
    from adapld_cli.model import kernels

    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) not in FAMILIES:
        return f"not a {' or '.join(FAMILIES)} model"
    if getattr(model, "adapld_kernels", "stock") != "exact":
        return "the exact kernels are not in use"
    if kernels._native_attention() is None:
        return "the native attention kernel is not built"
    if any(t != "full_attention" for t in getattr(config, "layer_types", None) or []):
        return "a layer is not full attention"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"the MLP activation is {config.hidden_act}, not silu"
    base = getattr(model, "model", None)
    if base is None or not hasattr(base, "layers") or not hasattr(base, "rotary_emb"):
        return "no decoder layers or rotary embedding where expected"
    if getattr(config, "pretraining_tp", 1) != 1:
        return "tensor-parallel pretraining slices"
    if any(_rope_of(layer.self_attn) is None for layer in base.layers):
        return "no apply_rotary_pos_emb beside the attention class"
    return None


def _rope_of(attn: Any) -> Any:
    """The ``apply_rotary_pos_emb`` of the module defining ``attn``'s class: the very function
    transformers' attention calls."""
    import sys

    module = sys.modules.get(type(attn).__module__)
    return getattr(module, "apply_rotary_pos_emb", None)


def install(model: Any) -> bool:
    """Rewire ``model`` (module docstring) unless :func:`reason` objects or
    ``$ADAPLD_LEAN`` is off; returns whether it did. Idempotent; sets ``model.adapld_lean``."""
    if getattr(model, "adapld_lean", False):
        return True
    if not enabled() or reason(model) is not None:
        model.adapld_lean = False
        return False
    from adapld_cli.compat import cache_keyword

    base = model.model
    for layer in base.layers:
        attn, mlp = layer.self_attn, layer.mlp
        attn.adapld_rope = _rope_of(attn)
        attn.adapld_qkv = fuse([attn.q_proj, attn.k_proj, attn.v_proj])
        mlp.adapld_gate_up = fuse([mlp.gate_proj, mlp.up_proj])
        layer.adapld_native = native_layer(layer, model.config)
        layer.adapld_cache_kw = cache_keyword(type(layer).forward)
        layer.forward = types.MethodType(_layer_forward, layer)
    base.adapld_cache_kw = cache_keyword(type(base).forward)
    base.adapld_stock_forward = base.forward
    base.forward = types.MethodType(_base_forward, base)
    model.adapld_lean = True
    return True


# ----------------------------------------------------------------------------- projections


class Fused:
    """Projections ``parts`` of one input computed together: ``__call__(x [..., in])`` -> each
    part's output ``[..., out_i]``, in order. With ``groups`` (runs of consecutive parts of one
    kind), one ``mm_i8_parts`` call per group over its parts' weights, read where they are;
    without, the parts one by one."""

    def __init__(self, parts: list[Any], groups: list[list[Any]] | None) -> None:
        self.parts, self.groups = parts, groups
        self.sizes = [p.out_features for p in parts]
        self.calls = [weight_set(g) for g in groups or []]
        # per group: the kernel, its arguments after the input, its parts' output sizes
        self._runs = [
            (g[0].ext.mm_i8_parts, (c["kind"], *_args(c)), [p.out_features for p in g])
            for g, c in zip(groups or [], self.calls, strict=True)
        ]

    @property
    def fused(self) -> bool:
        return self.groups is not None

    def __call__(self, x: Any) -> list[Any]:
        if self.groups is None:
            return [p(x) for p in self.parts]
        import torch

        shape = x.shape
        x2 = x.reshape(-1, shape[-1]).to(torch.bfloat16).contiguous()  # [M, in]
        outs: list[Any] = []
        for run, (kind, *args), sizes in self._runs:
            y = run(kind, x2, *args, False).reshape(*shape[:-1], -1)
            # contiguous: the parts' outputs as the separate layers return them
            outs += [part.contiguous() for part in y.split(sizes, dim=-1)]
        return outs


def weight_set(parts: list[Any]) -> dict[str, Any]:
    """The ``mm_i8_parts`` arguments of quantized linears of one kind (an empty bias: none)."""
    import torch

    none = torch.empty(0)
    return {
        "kind": parts[0].kind,
        **{name: [getattr(p, name) for p in parts] for name in ("qp", "sc", "dd", "offsets")},
        "bias": [none if p.fbias is None else p.fbias for p in parts],
    }


def _args(call: dict[str, Any]) -> list[Any]:
    return [call[name] for name in ("qp", "sc", "dd", "offsets", "bias")]


def fuse(parts: list[Any]) -> Fused:
    """The parts as one call per run of one kind when they are all :class:`QuantLinear` layers
    of one input size taking int8 inputs (``qmm.cpp`` computes each 16-column tile on its own
    from the same quantized rows, so every value is the separate call's); else one by one.
    Q4_K_M files store some layers' ``v_proj`` as Q6_K: then ``q``/``k`` are one call, ``v``
    another."""
    from adapld_cli.model.quant import quant_linear_class

    cls = quant_linear_class()
    first = parts[0]
    if not all(isinstance(p, cls) and p.int8 and p.in_features == first.in_features for p in parts):
        return Fused(parts, None)
    groups: list[list[Any]] = []
    for p in parts:
        if groups and groups[-1][0].kind == p.kind:
            groups[-1].append(p)
        else:
            groups.append([p])
    return Fused(parts, groups)


def native_layer(layer: Any, config: Any) -> Any | None:
    """The layer as ``qmm.cpp``'s ``DecodeLayer`` (the whole decoding-pass layer in two native
    calls around the cache write) when all its linears take int8 inputs and its q/k/v and
    gate/up are fused, in bfloat16; else None (the Python form below runs)."""
    import torch

    from adapld_cli.model.quant import quant_linear_class

    cls = quant_linear_class()
    attn, mlp = layer.self_attn, layer.mlp
    qkv, gate_up = attn.adapld_qkv, mlp.adapld_gate_up
    heads, kv_heads, d = config.num_attention_heads, config.num_key_value_heads, attn.head_dim
    norms = (layer.input_layernorm, layer.post_attention_layernorm)
    if not (
        getattr(attn, "q_norm", None) is None  # Qwen3's per-head q/k norms: the Python form
        and qkv.fused
        and gate_up.fused
        and qkv.sizes == [heads * d, kv_heads * d, kv_heads * d]
        and all(isinstance(p, cls) and p.int8 for p in (attn.o_proj, mlp.down_proj))
        and all(norm.weight.dtype == torch.bfloat16 for norm in norms)
    ):
        return None
    return qkv.parts[0].ext.DecodeLayer(
        norms[0].weight.detach(),
        float(norms[0].variance_epsilon),
        norms[1].weight.detach(),
        float(norms[1].variance_epsilon),
        qkv.calls,
        weight_set([attn.o_proj]),
        gate_up.calls,
        weight_set([mlp.down_proj]),
        heads,
        kv_heads,
        d,
        float(attn.scaling),
    )


# ----------------------------------------------------------------------------- forwards


def _rms_norm(norm: Any, x: Any) -> Any:
    """``Qwen2RMSNorm`` / ``Qwen3RMSNorm`` / ``LlamaRMSNorm``'s own forward, without the
    module call."""
    return type(norm).forward(norm, x)


def _lean_ok(batch: int, n: int, mask: Any, cache: Any) -> bool:
    """Whether a pass of ``n`` tokens (batch ``batch``) takes the lean forward: one sequence,
    a decoding-sized pass, a cache, and no mask or a prepared 4D one."""
    import torch

    from adapld_cli.model.kernels import EXACT_MAX_QUERIES

    return (
        batch == 1
        and n <= EXACT_MAX_QUERIES
        and cache is not None
        and (mask is None or (isinstance(mask, torch.Tensor) and mask.dim() == 4))
    )


def _attention(layer: Any, x: Any, cos: Any, sin: Any, mask: Any, cache: Any) -> Any:
    """The attention block of one decoder layer over normed inputs ``x [1, n, H]``."""
    from adapld_cli.model import kernels

    attn = layer.self_attn
    n, d = x.shape[1], attn.head_dim
    q, k, v = attn.adapld_qkv(x)  # [1, n, heads * d] each
    q, k = q.view(1, n, -1, d), k.view(1, n, -1, d)
    if getattr(attn, "q_norm", None) is not None:  # Qwen3: per head, before RoPE
        q, k = _rms_norm(attn.q_norm, q), _rms_norm(attn.k_norm, k)
    q = q.transpose(1, 2)  # [1, H, n, d]
    k = k.transpose(1, 2)  # [1, KV, n, d]
    v = v.view(1, n, -1, d).transpose(1, 2)
    q, k = attn.adapld_rope(q, k, cos, sin)
    keys, values = cache.update(k, v, attn.layer_idx)  # [1, KV, S, d] views
    out, _ = kernels.exact_attention(attn, q, keys, values, mask, scaling=attn.scaling)
    return attn.o_proj(out.reshape(1, n, -1))  # out [1, n, H, d]


def _layer_forward(
    self: Any,
    hidden_states: Any,
    attention_mask: Any = None,
    position_ids: Any = None,
    cache: Any = None,
    use_cache: bool | None = False,
    position_embeddings: Any = None,
    **kwargs: Any,
) -> Any:
    """A decoder layer's forward: the lean ops for decoding passes, the stock layer else."""
    if kwargs.get("past_key_values") is not None and cache is None:
        cache = kwargs.pop("past_key_values")
    batch, n = hidden_states.shape[:2]
    if not _lean_ok(batch, n, attention_mask, cache) or position_embeddings is None:
        return type(self).forward(
            self,
            hidden_states,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=use_cache,
            position_embeddings=position_embeddings,
            **{self.adapld_cache_kw: cache},
            **kwargs,
        )
    cos, sin = position_embeddings
    native = self.adapld_native
    if native is not None and hidden_states.dtype == cos.dtype:
        out = _native_forward(self, native, hidden_states, cos, sin, attention_mask, cache)
        if out is not None:
            return out
    residual = hidden_states
    h = _rms_norm(self.input_layernorm, hidden_states)
    h = residual + _attention(self, h, cos, sin, attention_mask, cache)
    residual = h
    h = _rms_norm(self.post_attention_layernorm, h)
    gate, up = self.mlp.adapld_gate_up(h)
    return residual + self.mlp.down_proj(self.mlp.act_fn(gate) * up)


def _native_forward(
    layer: Any, native: Any, hidden: Any, cos: Any, sin: Any, mask: Any, cache: Any
) -> Any | None:
    """The layer by its ``DecodeLayer``: ``hidden [1, n, E]`` -> ``[1, n, E]``; None (nothing
    done) when the mask has no native attention plan."""
    from adapld_cli.model import kernels

    n, idx = hidden.shape[1], layer.self_attn.layer_idx
    plan = kernels._plans.get(mask, n, cache.get_seq_length(idx) + n, True)
    if plan is None:
        return None
    x = hidden[0].contiguous()  # [n, E]
    q, k, v = native.front(x, cos[0].contiguous(), sin[0].contiguous())
    keys, values = cache.update(k, v, idx)  # [1, KV, S, d]
    keys, values = kernels._head_rows(keys[0], values[0])
    return native.back(x, q, keys, values, *plan).unsqueeze(0)


def _base_forward(
    self: Any,
    input_ids: Any = None,
    attention_mask: Any = None,
    position_ids: Any = None,
    cache: Any = None,
    inputs_embeds: Any = None,
    use_cache: bool | None = None,
    **kwargs: Any,
) -> Any:
    """The decoder's forward: lean for decoding passes with a cache and positions given,
    transformers' own otherwise."""
    if cache is None:
        cache = kwargs.pop("past_key_values", None)
    lean = (
        input_ids is not None
        and inputs_embeds is None
        and position_ids is not None
        and use_cache
        and not kwargs
        and input_ids.dim() == 2
        and _lean_ok(*input_ids.shape, attention_mask, cache)
    )
    if not lean:
        return self.adapld_stock_forward(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            **{self.adapld_cache_kw: cache},
            **kwargs,
        )
    from transformers.modeling_outputs import BaseModelOutputWithPast

    hidden = self.embed_tokens(input_ids)
    position_embeddings = self.rotary_emb(hidden, position_ids)
    for layer in self.layers[: self.config.num_hidden_layers]:
        hidden = layer(
            hidden,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            use_cache=True,
            position_embeddings=position_embeddings,
        )
    last = _rms_norm(self.norm, hidden)
    return BaseModelOutputWithPast(last_hidden_state=last, **{self.adapld_cache_kw: cache})
