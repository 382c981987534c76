"""What one forward pass over ``n`` new tokens costs on the loaded model (``--verify-cost``).

Contract: :func:`measure` fills a KV cache with ``context`` random tokens (seeded) through the
engine's own runner (:class:`adapld_cli.engine.runner.ModelRunner`: the cache, forward and
kernels decoding uses), then for each ``n`` in ``sizes`` runs one untimed pass over ``n``
random new tokens (warm-up) and ``repeats`` timed ones, keeping the cache back to ``context``
after each, and returns one :class:`CostPoint` per ``n``: the median milliseconds and their
ratio to ``n = 1`` (the first size). The whole model runs (LM head over all ``n`` rows
included), as the model is loaded: the curve shows whatever kernels adapld's loading chose.
``context`` is shortened when the model's positions would not fit ``context + max(sizes)``.
With ``parts``, each point also says what two parts of the pass cost on their own at the
same shapes: the exact attention kernel over every layer's real cache (random queries: its
cost does not depend on their values), and the LM head over ``n`` rows; the rest is the
products, norms and cache writes. :func:`measure_contexts` runs :func:`measure` for several
cache lengths in one process (one model load, the same seed) and times each prefill.
:func:`format_curve` renders the points as a plain-text table; :func:`curve_for` is
``--verify-cost``: the tables for a loaded model with its passes as ``settings`` say on its
device. This is the cost model the drafters adapt to (``adapld_cli.engine.cost``;
docs/design.md, "Cost model"). With ``graphs`` each pass is the engine's static verify pass
instead (:mod:`adapld_cli.engine.graphs`: a CUDA graph replay on a GPU, captured during the
warm-up pass), its LM head over all ``n`` rows computed after it.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

SIZES = (1, 2, 4, 8, 16, 32, 64)
CONTEXT = 1000
REPEATS = 5
TOKEN_RANGE = 20000  # random ids below this (and below the vocabulary size)


@dataclass(frozen=True)
class CostPoint:
    """Median cost of one forward over ``n`` new tokens: milliseconds and ratio to n = 1;
    with parts measured, the attention kernel's and the LM head's milliseconds alone."""

    n: int
    ms: float
    ratio: float
    attention_ms: float | None = None
    head_ms: float | None = None


@dataclass(frozen=True)
class ContextCurve:
    """The points over one cache length, and the prefill that filled it (tokens/s)."""

    context: int
    prefill_rate: float
    points: list[CostPoint]


def fitting_context(model: Any, context: int, largest: int) -> int:
    """``context`` shortened so that ``context + largest`` fits the model's positions."""
    limit = getattr(model.config, "max_position_embeddings", None) or getattr(
        model.config, "n_positions", None
    )
    if limit is not None:
        context = min(context, int(limit) - largest)
    if context < 1:
        raise ValueError(f"the model has too few positions for {largest} new tokens")
    return context


def measure(
    model: Any,
    *,
    context: int = CONTEXT,
    sizes: tuple[int, ...] = SIZES,
    repeats: int = REPEATS,
    seed: int = 0,
    graphs: bool = False,
    uniform: bool = False,
    planes: bool = False,
    span: int = 0,
    parts: bool = False,
) -> list[CostPoint]:
    """Per-``n`` forward cost on ``model`` over a ``context``-token cache (see module doc).
    ``graphs``: through the engine's static passes; ``uniform``: all of one shape (then
    every ``n`` costs one full pass), ``planes``: with key planes, ``span``: attending keys
    in spans of that many rows (0: the whole cache; ``AdaPLDSettings``); ``parts``: with the
    attention's and the LM head's own costs (eager passes only)."""
    return measure_contexts(
        model, contexts=(context,), sizes=sizes, repeats=repeats, seed=seed, graphs=graphs,
        uniform=uniform, planes=planes, span=span, parts=parts,
    )[0].points  # fmt: skip


def measure_contexts(
    model: Any,
    *,
    contexts: tuple[int, ...] = (CONTEXT,),
    sizes: tuple[int, ...] = SIZES,
    repeats: int = REPEATS,
    seed: int = 0,
    graphs: bool = False,
    uniform: bool = False,
    planes: bool = False,
    span: int = 0,
    parts: bool = False,
) -> list[ContextCurve]:
    """:func:`measure` at each cache length of ``contexts``, in order, one runner each."""
    import torch

    if not sizes or min(sizes) < 1 or repeats < 1 or not contexts:
        raise ValueError("need sizes >= 1, repeats >= 1 and a context")
    gen = torch.Generator().manual_seed(seed)
    high = min(TOKEN_RANGE, model.config.vocab_size)
    curves = []
    _warm_up(model, high, gen)
    for wanted in contexts:
        context = fitting_context(model, wanted, max(sizes))
        runner, rows = _runner(model, context, sizes, graphs, uniform, planes, span)
        try:
            t0 = time.perf_counter()
            runner.prefill(torch.randint(0, high, (context,), generator=gen).tolist(), 0)
            rate = context / max(time.perf_counter() - t0, 1e-9)
            medians: dict[int, float] = {}
            extra: dict[int, tuple[float | None, float | None]] = {}
            for n in sizes:
                ids = torch.randint(0, high, (n,), generator=gen).tolist()
                times = [_timed_pass(runner, ids, context) for _ in range(repeats + 1)]
                medians[n] = statistics.median(times[1:])  # the first pass warms up
                if parts and not (graphs or uniform):
                    extra[n] = _parts(runner, ids, context, repeats, rows)
        finally:
            runner.close()
        curves.append(ContextCurve(context, rate, _points(medians, sizes, extra)))
    return curves


def _runner(
    model: Any, context: int, sizes: tuple[int, ...], graphs: bool, uniform: bool,
    planes: bool, span: int,
) -> tuple[Any, int]:  # fmt: skip
    """The engine's runner for these passes, and the rows its widest pass takes."""
    from adapld_cli.engine.graphs import BUCKETS, uniform_shape
    from adapld_cli.engine.runner import ModelRunner
    from adapld_cli.engine.settings import AdaPLDSettings

    if not (graphs or uniform):
        runner = ModelRunner(
            model, hidden_layer=None, want_hidden=False, capacity=context + max(sizes) + 8
        )
        return runner, max(sizes)
    # uniform: the default settings' one shape (80 rows for a 64-node budget), as adapld runs
    widest = max(uniform_shape(AdaPLDSettings().node_budget), max(sizes))
    shapes = (widest,) if uniform else BUCKETS
    runner = ModelRunner(
        model, hidden_layer=None, want_hidden=False, capacity=context + max(shapes) + 8,
        static=True, shapes=shapes, planes=uniform and planes, span=span,
    )  # fmt: skip
    return runner, widest


def _warm_up(model: Any, high: int, gen: Any) -> None:
    """One short prefill on a runner of its own, so that one-time work (kernel builds,
    first-call setup) does not land in the first context's prefill rate."""
    import torch

    from adapld_cli.engine.runner import ModelRunner

    runner = ModelRunner(model, hidden_layer=None, want_hidden=False, capacity=72)
    try:
        runner.prefill(torch.randint(0, high, (64,), generator=gen).tolist(), 0)
    finally:
        runner.close()


def _sync(runner: Any) -> None:
    if runner.device.type == "cuda":
        import torch

        torch.cuda.synchronize()


def _timed_pass(runner: Any, ids: list[int], context: int) -> float:
    """Seconds of one verify pass over ``ids`` (a chain after the cache, every row's logits
    computed); the cache is kept back to ``context`` rows."""
    _sync(runner)
    t0 = time.perf_counter()
    runner.verify(ids, None, None).logits.rows(list(range(len(ids))))
    _sync(runner)
    seconds = time.perf_counter() - t0
    runner.keep(context, [])
    return seconds


def _parts(
    runner: Any, ids: list[int], context: int, repeats: int, rows: int
) -> tuple[float | None, float | None]:
    """Median seconds of the exact attention kernel over every layer's cache after a pass
    of ``ids`` (None where the native kernel does not run this model) and of the LM head
    over ``len(ids)`` rows."""
    import torch

    from adapld_cli.model import kernels

    n = len(ids)
    config = runner.model.config
    heads = config.num_attention_heads
    d = getattr(config, "head_dim", None) or config.hidden_size // heads
    attention = None
    native = kernels._native_attention()
    if native is not None and getattr(runner.model, "adapld_kernels", None) == "exact":
        with torch.inference_mode():
            runner.step(ids, None, None)  # the cache now holds context + n rows
            layers = [(layer.keys[0], layer.values[0]) for layer in runner.cache.layers]
            if layers and layers[0][0].dtype in (torch.float32, torch.bfloat16):
                plan = kernels.native_plan(None, n, context + n)
                q = torch.randn(n, heads, d, generator=torch.Generator().manual_seed(n))
                times = []
                for _ in range(repeats + 1):
                    t0 = time.perf_counter()
                    for keys, values in layers:
                        native.attention(q, *kernels._head_rows(keys, values), *plan)
                    times.append(time.perf_counter() - t0)
                attention = statistics.median(times[1:])
        runner.keep(context, [])
    hidden = torch.randn(n, config.hidden_size, generator=torch.Generator().manual_seed(0))
    hidden = hidden.to(runner.dtype).to(runner.device)
    times = []
    with torch.inference_mode():
        for _ in range(repeats + 1):
            _sync(runner)
            t0 = time.perf_counter()
            runner.logits(hidden)
            _sync(runner)
            times.append(time.perf_counter() - t0)
    return attention, statistics.median(times[1:])


def _points(
    medians: dict[int, float],
    sizes: tuple[int, ...],
    extra: dict[int, tuple[float | None, float | None]] | None = None,
) -> list[CostPoint]:
    """Median seconds per size as points: milliseconds and the ratio to the first size."""
    base = medians[sizes[0]]
    points = []
    for n in sizes:
        attention, head = (extra or {}).get(n, (None, None))
        points.append(
            CostPoint(
                n,
                medians[n] * 1e3,
                medians[n] / base if base > 0 else 0.0,
                None if attention is None else attention * 1e3,
                None if head is None else head * 1e3,
            )
        )
    return points


def format_curve(
    points: list[CostPoint], title: str, against: list[CostPoint] | None = None
) -> str:
    """``title`` and a table: n, milliseconds, ratio to n = 1; with ``against`` (the same
    sizes over another cache) the ratio to its milliseconds; with parts measured, the
    attention's and the LM head's milliseconds and the rest."""
    parts = any(p.head_ms is not None for p in points)
    header = f"{'n':>4}  {'ms':>9}  {'x n=1':>7}"
    header += f"  {'x first':>7}" if against else ""
    header += f"  {'attention':>9}  {'lm head':>7}  {'rest':>7}" if parts else ""
    lines = [title, header]
    first = {p.n: p.ms for p in against or []}
    for p in points:
        line = f"{p.n:>4}  {p.ms:>9.1f}  {p.ratio:>7.2f}"
        if against:
            line += f"  {p.ms / first[p.n]:>7.2f}" if first.get(p.n) else f"  {'-':>7}"
        if parts:
            att = "-" if p.attention_ms is None else f"{p.attention_ms:.1f}"
            head = p.head_ms or 0.0
            rest = p.ms - head - (p.attention_ms or 0.0)
            line += f"  {att:>9}  {head:>7.1f}  {rest:>7.1f}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def curve_for(
    loaded: Any, settings: Any = None, contexts: tuple[int, ...] = (CONTEXT,), parts: bool = False
) -> str:
    """The verify-cost tables of ``loaded`` (a :class:`~adapld_cli.model.LoadedModel`), one per
    cache length of ``contexts``: static passes or eager ones as ``settings`` (default: the
    defaults) resolve on the model's device; ``parts`` as :func:`measure`. Raises ValueError
    for a model with too few positions."""
    import torch

    from adapld_cli.engine.settings import AdaPLDSettings

    device_type = next(loaded.model.parameters()).device.type
    resolved = (settings or AdaPLDSettings()).resolve(device_type)
    graphs, uniform, planes = bool(resolved.graphs), bool(resolved.uniform), bool(resolved.planes)
    span = int(resolved.span or 0) if graphs else 0
    passes = ""
    if graphs:
        passes = ", uniform static passes" if uniform else ", static passes (graphs=true)"
        passes += " with key planes" if planes else ""
        passes += f", key span {span}" if span else ""
    curves = measure_contexts(
        loaded.model, contexts=contexts, graphs=graphs, uniform=uniform, planes=planes,
        span=span, parts=parts,
    )  # fmt: skip
    tables = []
    for curve in curves:
        title = (
            f"forward cost over a {curve.context}-token cache, median of {REPEATS}: "
            f"{loaded.name} [{loaded.device}, {loaded.dtype}, {loaded.weights_label()}, "
            f"threads={torch.get_num_threads()}{passes}]; prefill {curve.prefill_rate:.0f} tok/s"
        )
        against = curves[0].points if len(curves) > 1 and curve is not curves[0] else None
        tables.append(format_curve(curve.points, title, against))
    return "\n".join(tables)
