"""Typed settings of the AdaPLD drafter, with documented defaults and ablation switches.

Every knob of the method lives here; the CLI and the benchmark build these from options, and
:func:`parse_overrides` reads ``KEY=VALUE`` overrides (``adapld bench --set``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

# Default key span of static passes on CUDA (``AdaPLDSettings.span``): a pass at a cache of
# ``L`` rows attends ``ceil((L + rows) / 512) * 512`` keys, up to 8 graphs on a 4,096-row cache.
SPAN_ROWS = 512
# ``AdaPLDSettings.top_k`` by default: where passes grow with their size, and where every
# pass costs the same (uniform passes), whose free rows take recycled successors from a table
# of this width (docs/design.md, "Cost model")
TOP_K, TOP_K_FLAT = 3, 8


@dataclass(frozen=True)
class AdaPLDSettings:
    """Knobs of AdaPLD drafting (paper §3; docs/design.md).

    Attributes:
        max_draft_len: ``L``, the longest copied span drafted in one step (the step's node
            budget bounds it too).
        top_k: ``K``, first-token alternatives (branches) taken from cached top-K predictions,
            and the width of the table of recycled successors. ``None`` = :data:`TOP_K_FLAT`
            where passes all run at one shape (uniform), else :data:`TOP_K`
            (:meth:`topk_width`).
        ctxt: longest n-gram used as the lexical query; shorter n-grams down to ``min_ctxt``
            are tried when the longest finds nothing (strict hit = any n-gram match).
        min_ctxt: shortest n-gram query.
        tau: semantic fallback keeps the ``tau`` most similar cached positions.
        window: the semantic fallback searches hidden states of the last ``window`` positions
            of the context (prompt included); ``0`` searches the whole context. Editing needs
            the source file searchable, so the default covers typical files.
        hidden_layer: decoder layer whose output is cached for reranking and the fallback;
            ``None`` = the middle layer.
        sim_floor: cosine similarity a semantic candidate must reach to be drafted.
        node_budget: most draft nodes in one verification (root excluded); with
            ``uniform`` passes, whose one shape rounds ``node_budget + 1`` up to 16 rows,
            drafts may fill the shape (79 nodes for 64): every row is computed anyway.
        branch_len: tokens appended to each branch from a reuse continuation.
        max_candidates: most recent lexical occurrences considered for reranking.
        prompt_topk: compute the model's top-K at every prompt position during prefill (an
            LM-head pass over the prompt: ~+40% prefill time on a CPU, little on a GPU).
            Without it a prompt position's only "prediction" is the token that followed it.
            ``None`` = on for CUDA devices only.
        pass_topk: compute the model's top-K at each pass's accepted positions from the
            logits the acceptance walk computed (on a CPU ~0.7 ms more host work a pass on the
            six edit cases, where branches from generated text rarely paid: 10 branch steps,
            1 token accepted, in 305 passes; README, Performance). Without it those
            positions are treated as prompt positions without ``prompt_topk``: the token
            that followed stands in, and ``topk_lookup`` computes the real top-K on demand.
            ``None`` = on for CUDA devices only.
        topk_lookup: compute a position's top-K on demand from its cached final hidden state
            (one LM-head row) when a branch or the semantic fallback needs it and it is not
            known yet. ``None`` = when the expected gain beats the lookup's measured cost;
            ``True`` / ``False`` = always / never (then the token that followed stands in).
        semantic: the semantic fallback. ``None`` = on for CUDA devices only: on a CPU it
            cost more than it gained (README, Performance: ablations on 20 CanItEdit tasks).
        graphs: verify passes as static-shape passes over the whole preallocated cache, one
            shape per size bucket (or one shape: ``uniform``), captured and replayed as CUDA
            graphs on a GPU (:mod:`adapld_cli.engine.graphs`); applies to every method,
            ``ar`` included. ``None`` = on for CUDA devices only (:meth:`static_passes`): on
            an H200 they made adapld 1.8-3.5x faster than eager passes (docs/design.md, "Static
            passes"); on a CPU the passes run eagerly, only slower (the tests use that). The
            bench's ``*-graphs`` / ``*-eager`` methods force either.
        uniform: every pass at one static shape, the largest pass's (``node_budget + 1``
            rows rounded up to 16; :func:`adapld_cli.engine.graphs.uniform_shape`), ``ar``'s
            single-token steps and the LM head included; ``True`` implies ``graphs``. No
            product then sees a pass's size, so where the kernels are not batch-invariant (a
            GPU's: cuBLAS picks kernels by shape) the rows of the draft tree's copied chain
            are ``ar``'s bit for bit; a branch node's keys lie further on than ``ar`` puts
            them, which attention can still see (``planes``). It costs a full pass each step:
            nothing much where a pass's cost is flat in its size (a GPU), too much on a CPU
            (which has exact kernels). The KV cache is then preallocated for all of
            ``max_new_tokens`` (its width is a shape the kernels see; growing it mid-answer
            would change it at a different step for each method). ``None`` = wherever static
            passes run on CUDA (:meth:`uniform_passes`): on an H200 passes of several sizes
            were not exact (2 of 26 CanItEdit tasks differed from ``ar``; 77 of 130 tree rows
            bitwise equal to single steps), uniform passes with ``planes`` were (130 of 130;
            docs/design.md, "Exactness on a GPU").
        planes: with ``uniform``, each row attends its own copy of the keys laid out as
            plain decoding lays them out for it (:func:`adapld_cli.engine.graphs.
            planes_attention`), so a branch node's attention has ``ar``'s inputs too: exact
            where the attention kernel computes a batch item independently of the others
            (torch's stock CPU kernels do not always; a GPU's did). Costs a copy of the keys
            per row and layer. ``None`` = with uniform passes on CUDA (:meth:`key_planes`).
        span: static passes attend the cache's keys up to the first multiple of ``span``
            rows past the pass, not the whole preallocated cache (``0``): the keys beyond
            are masked for every row anyway and add exact zeros, while attention and the
            key planes' copies cost in proportion to the keys read (on an H200 attention
            over a 4,096-row cache was 67 % of a captured pass's GPU time). One captured
            graph per span in use. ``None`` = :data:`SPAN_ROWS` wherever static passes run
            on CUDA, else 0 (:meth:`key_span`).
        branches / recycle / cursor / rerank / adaptive: ablation switches (like
            ``semantic=False``); ``recycle``: recycled successors fill the rows a flat
            pass leaves free, and compete for a no-hit step's nodes where passes cost by
            their size (it needs ``branches``).
            With ``adaptive=False`` the drafter always drafts ``max_draft_len`` and the full
            tree.
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

    def static_passes(self, device_type: str) -> bool:
        """Whether verify passes run as static passes (:mod:`adapld_cli.engine.graphs`) on a
        device of this type (``"cuda"``, ``"cpu"`` ...): always with ``uniform=True``, else
        as ``graphs`` says, ``None`` meaning on CUDA only."""
        if self.uniform:
            return True
        return device_type == "cuda" if self.graphs is None else self.graphs

    def uniform_passes(self, device_type: str) -> bool:
        """Whether every pass runs at one shape (``uniform``) on a device of this type:
        ``None`` meaning whenever static passes run on CUDA."""
        if self.uniform is None:
            return device_type == "cuda" and self.static_passes(device_type)
        return self.uniform

    def topk_width(self, device_type: str | None = None) -> int:
        """``K`` (``top_k``) on a device of this type: ``None`` meaning :data:`TOP_K_FLAT`
        where passes all run at one shape (:meth:`uniform_passes`), else (and without a
        device) :data:`TOP_K`."""
        if self.top_k is not None:
            return self.top_k
        flat = device_type is not None and self.uniform_passes(device_type)
        return TOP_K_FLAT if flat else TOP_K

    def key_planes(self, device_type: str) -> bool:
        """Whether uniform passes attend per-row key planes (``planes``) on a device of this
        type: ``None`` meaning on CUDA."""
        if not self.uniform_passes(device_type):
            return False
        return device_type == "cuda" if self.planes is None else self.planes

    def key_span(self, device_type: str) -> int:
        """The rows per step of the keys static passes attend (``span``; 0 = the whole
        cache) on a device of this type: ``None`` meaning :data:`SPAN_ROWS` on CUDA."""
        if self.span is None:
            return SPAN_ROWS if device_type == "cuda" else 0
        if self.span < 0:
            raise ValueError(f"span must be >= 0, not {self.span}")
        return self.span

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
