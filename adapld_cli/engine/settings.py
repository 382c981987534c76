"""Typed settings of the AdaPLD drafter and of the verify passes, with documented defaults
and ablation switches.

Every knob of the method lives here; the CLI and the benchmark build these from options, and
:func:`parse_overrides` reads ``KEY=VALUE`` overrides (``adapld bench --set``). Defaults that
depend on the device are ``None`` until :meth:`AdaPLDSettings.resolve` settles them, once per
generation, at the engine's entry point; the engine reads resolved settings only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import TypeVar

# ``AdaPLDSettings.span`` on CUDA by default: a static pass at a cache of ``L`` rows attends
# ``ceil((L + rows) / SPAN_ROWS) * SPAN_ROWS`` keys (docs/design.md, "Key spans").
SPAN_ROWS = 512
# ``AdaPLDSettings.top_k`` by default: where passes grow with their size, and where every
# pass costs the same (uniform passes), whose free rows take recycled successors from a table
# of this width (docs/design.md, "Free rows hold recycled successors")
TOP_K, TOP_K_FLAT = 3, 8

_T = TypeVar("_T")


def _default(value: _T | None, default: _T) -> _T:
    return default if value is None else value


@dataclass(frozen=True)
class AdaPLDSettings:
    """Knobs of AdaPLD drafting (paper §3; docs/design.md, "1. The engine") and of the verify
    passes of every method. "Default" below is what ``None`` means, settled by
    :meth:`resolve` for the device.

    Attributes:
        max_draft_len: ``L``, the longest copied span drafted in one step (the step's node
            budget bounds it too).
        top_k: ``K``, first-token alternatives (branches) taken from cached top-K
            predictions, and the width of the table of recycled successors. Default:
            :data:`TOP_K_FLAT` with uniform passes, else :data:`TOP_K`.
        ctxt: longest n-gram used as the lexical query; shorter ones down to ``min_ctxt``
            are tried when it finds nothing (a hit = any n-gram match).
        min_ctxt: shortest n-gram query.
        tau: the semantic fallback keeps the ``tau`` most similar cached positions.
        window: the semantic fallback searches the hidden states of the last ``window``
            positions (prompt included; ``0``: all), enough to cover a typical source file.
        hidden_layer: decoder layer whose output is cached for reranking and the fallback;
            ``None``: the model's middle layer (the runner picks it).
        sim_floor: cosine similarity a semantic candidate must reach to be drafted.
        node_budget: most draft nodes in one verification (root excluded); with uniform
            passes drafts may fill the whole shape, whose rows are computed anyway.
        branch_len: tokens appended to each branch from a reuse continuation.
        max_candidates: most recent lexical occurrences considered for reranking.
        prompt_topk: compute the model's top-K at every prompt position during prefill
            (else the token that followed a position stands in for it). Default: on CUDA
            only: on a CPU it costs a large share of the prefill (docs/design.md,
            "1. The engine", ``topk[j]``).
        pass_topk: compute the model's top-K at each pass's accepted positions, read with
            the argmax (else as for the prompt without ``prompt_topk``). Default: on CUDA
            only: on a CPU it cost more host work than the branches it fed gained (same
            section).
        topk_lookup: compute a missing top-K row on demand from its cached final hidden
            state: ``None`` when the expected gain beats the lookup's measured cost,
            ``True`` / ``False`` always / never. Not a device default: :meth:`resolve`
            keeps it.
        semantic: the semantic fallback. Default: on CUDA only: on a CPU it cost more than
            it gained (docs/performance.md, "Ablations (the same run)").
        graphs: every method's verify passes as static passes, replayed as CUDA graphs on
            a GPU (:mod:`adapld_cli.engine.graphs`). Default: on CUDA only (docs/design.md,
            "Static passes (CUDA graphs)"); on a CPU they are exact but slower.
        uniform: every pass of every method at one static shape (``graphs.uniform_shape``),
            the LM head included, the KV cache preallocated for all of ``max_new_tokens``;
            implies ``graphs``. The copied chain's rows are then ``ar``'s bit for bit on
            kernels that are not batch-invariant, at a full pass a step. Default: wherever
            static passes run on CUDA (docs/design.md, "Exactness on a GPU").
        planes: with ``uniform``, each row attends its own copy of the keys, laid out as
            plain decoding lays them out for it (``graphs.planes_attention``): branch rows
            exact too where the attention computes each batch item alone. Default: with
            uniform passes on CUDA (same section).
        span: static passes attend the cache's keys up to the next multiple of ``span``
            rows past the pass (``0``: the whole cache); the keys left out are masked anyway
            and add exact zeros, while attention costs by the keys read. One graph per span
            in use. Default: :data:`SPAN_ROWS` on CUDA, else 0 (docs/design.md, "Key
            spans").
        branches / recycle / cursor / rerank / adaptive: ablation switches (like
            ``semantic=False``). ``recycle`` (needs ``branches``): recycled successors fill
            the rows a uniform pass leaves free, and compete for a no-hit step's nodes where
            passes cost by their size. ``adaptive=False``: always ``max_draft_len`` and the
            full tree.
    """

    max_draft_len: int = 128
    top_k: int | None = None
    ctxt: int = 4
    min_ctxt: int = 2
    tau: int = 2
    window: int = 4096
    hidden_layer: int | None = None
    sim_floor: float = 0.6
    node_budget: int = 64
    branch_len: int = 2
    max_candidates: int = 64
    prompt_topk: bool | None = None
    pass_topk: bool | None = None
    topk_lookup: bool | None = None
    semantic: bool | None = None
    graphs: bool | None = None
    uniform: bool | None = None
    planes: bool | None = None
    span: int | None = None
    branches: bool = True
    recycle: bool = True
    cursor: bool = True
    rerank: bool = True
    adaptive: bool = True

    def resolve(self, device_type: str) -> AdaPLDSettings:
        """These settings on a device of this type (``"cuda"``, ``"cpu"`` ...): a copy with
        every device default settled, each field then what the engine does (``graphs``:
        whether passes are static, ``uniform`` implying it; ``planes`` only with uniform
        passes). Resolving resolved settings returns them unchanged. Raises ValueError for
        a negative ``span``."""
        cuda = device_type == "cuda"
        graphs = bool(self.uniform) or _default(self.graphs, cuda)
        uniform = _default(self.uniform, cuda and graphs)
        span = _default(self.span, SPAN_ROWS if cuda else 0)
        if span < 0:
            raise ValueError(f"span must be >= 0, not {span}")
        return replace(
            self,
            top_k=_default(self.top_k, TOP_K_FLAT if uniform else TOP_K),
            prompt_topk=_default(self.prompt_topk, cuda),
            pass_topk=_default(self.pass_topk, cuda),
            semantic=_default(self.semantic, cuda),
            graphs=graphs,
            uniform=uniform,
            planes=uniform and _default(self.planes, cuda),
            span=span,
        )

    @property
    def resolved(self) -> bool:
        """Whether every device default is settled (:meth:`resolve`)."""
        device_fields = (self.top_k, self.prompt_topk, self.pass_topk, self.semantic)
        return None not in (*device_fields, self.graphs, self.uniform, self.planes, self.span)

    # Views of :meth:`resolve` for callers outside the engine that ask about one field.

    def static_passes(self, device_type: str) -> bool:
        """Whether verify passes run as static passes on a device of this type."""
        return bool(self.resolve(device_type).graphs)

    def uniform_passes(self, device_type: str) -> bool:
        """Whether every pass runs at one shape on a device of this type."""
        return bool(self.resolve(device_type).uniform)

    def key_planes(self, device_type: str) -> bool:
        """Whether uniform passes attend per-row key planes on a device of this type."""
        return bool(self.resolve(device_type).planes)

    def key_span(self, device_type: str) -> int:
        """The key span step of static passes on a device of this type (0: the whole
        cache)."""
        return int(self.resolve(device_type).span)  # type: ignore[arg-type]  # resolved

    def without(self, component: str) -> AdaPLDSettings:
        """A copy with one component switched off (``semantic``, ``branches``, ``recycle``,
        ``cursor``, ``rerank`` or ``adaptive``), for ablations."""
        if component not in {"semantic", "branches", "recycle", "cursor", "rerank", "adaptive"}:
            raise ValueError(f"unknown AdaPLD component: {component}")
        return replace(self, **{component: False})


_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _parse_value(annotation: str, text: str) -> bool | int | float | None:
    """``text`` as a value of a field annotated ``annotation`` (e.g. ``"int | None"``)."""
    kinds = [k.strip() for k in annotation.split("|")]
    value = text.strip().lower()
    if "None" in kinds and value == "none":
        return None
    if "bool" in kinds:
        if value in _TRUE or value in _FALSE:
            return value in _TRUE
        raise ValueError(text)
    if "int" in kinds:
        return int(value)
    return float(value)


def parse_overrides(pairs: Sequence[str], base: AdaPLDSettings | None = None) -> AdaPLDSettings:
    """``base`` (default: the defaults) with ``KEY=VALUE`` overrides applied, values parsed by
    the field's type (``none`` for optional fields; booleans as true/false, 1/0, yes/no, on/off).

    Raises ValueError with a one-line message naming the bad pair.
    """
    base = base or AdaPLDSettings()
    types = {f.name: str(f.type) for f in fields(AdaPLDSettings)}
    changes: dict[str, bool | int | float | None] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or key not in types:
            raise ValueError(f"{pair}: expected KEY=VALUE with KEY in {', '.join(types)}")
        try:
            changes[key] = _parse_value(types[key], text)
        except ValueError:
            raise ValueError(f"{pair}: bad value for {key} ({types[key]})") from None
    return replace(base, **changes)
