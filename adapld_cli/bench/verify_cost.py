"""What one forward pass over ``n`` new tokens costs on the loaded model (``--verify-cost``).

Contract: :func:`measure` fills a KV cache with ``context`` random tokens (seeded), then for
each ``n`` in ``sizes`` runs one untimed pass over ``n`` random new tokens (warm-up) and
``repeats`` timed ones, cropping the cache back after each, and returns one
:class:`CostPoint` per ``n``: the median milliseconds and their ratio to ``n = 1`` (the first
size). The whole model runs (LM head over all ``n`` rows included), as the model is loaded:
the curve shows whatever kernels adapld's loading chose. ``context`` is shortened when the
model's positions would not fit ``context + max(sizes)``. :func:`format_curve` renders the
points as a plain-text table; :func:`curve_for` is ``--verify-cost``: the table for a loaded
model with its passes as ``settings`` say on its device. This is the cost model the drafters
adapt to (``adapld_cli.engine.cost``; docs/design.md, "Cost model"). With ``graphs`` each
pass is the engine's static verify pass instead (:mod:`adapld_cli.engine.graphs`: a CUDA
graph replay on a GPU, captured during the warm-up pass), its LM head over all ``n`` rows
computed after it.
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
    """Median cost of one forward over ``n`` new tokens: milliseconds and ratio to n = 1."""

    n: int
    ms: float
    ratio: float


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
) -> list[CostPoint]:
    """Per-``n`` forward cost on ``model`` over a ``context``-token cache (see module doc).
    ``graphs``: through the engine's static passes; ``uniform``: all of one shape (then
    every ``n`` costs one full pass), ``planes``: with key planes, ``span``: attending keys
    in spans of that many rows (0: the whole cache; ``AdaPLDSettings``)."""
    import torch
    from transformers import DynamicCache

    from adapld_cli.compat import cache_keyword

    if not sizes or min(sizes) < 1 or repeats < 1:
        raise ValueError("need sizes >= 1 and repeats >= 1")
    context = fitting_context(model, context, max(sizes))
    device = next(model.parameters()).device
    high = min(TOKEN_RANGE, model.config.vocab_size)
    gen = torch.Generator().manual_seed(seed)
    if graphs or uniform:
        return _static_curve(model, context, sizes, repeats, high, gen, uniform, planes, span)
    cache_kw = cache_keyword(model.forward)
    cache = DynamicCache(config=model.config)
    medians: dict[int, float] = {}
    with torch.inference_mode():
        model(torch.randint(0, high, (1, context), generator=gen).to(device), use_cache=True,
              **{cache_kw: cache})  # fmt: skip
        for n in sizes:
            ids = torch.randint(0, high, (1, n), generator=gen).to(device)
            times = [_timed_pass(model, ids, cache, cache_kw) for _ in range(repeats + 1)]
            medians[n] = statistics.median(times[1:])  # the first pass warms up
    return _points(medians, sizes)


def _static_curve(
    model: Any,
    context: int,
    sizes: tuple[int, ...],
    repeats: int,
    high: int,
    gen: Any,
    uniform: bool = False,
    planes: bool = False,
    span: int = 0,
) -> list[CostPoint]:
    """:func:`measure` through the engine's runner with static verify passes."""
    import torch

    from adapld_cli.engine.graphs import BUCKETS, uniform_shape
    from adapld_cli.engine.runner import ModelRunner
    from adapld_cli.engine.settings import AdaPLDSettings

    # uniform: the default settings' one shape (80 rows for a 64-node budget), as adapld runs
    widest = max(uniform_shape(AdaPLDSettings().node_budget), max(sizes))
    shapes = (widest,) if uniform else BUCKETS
    runner = ModelRunner(
        model, hidden_layer=None, want_hidden=False, capacity=context + max(shapes) + 8,
        static=True, shapes=shapes, planes=uniform and planes, span=span,
    )  # fmt: skip
    sync = torch.cuda.synchronize if runner.device.type == "cuda" else (lambda: None)
    medians: dict[int, float] = {}
    try:
        runner.prefill(torch.randint(0, high, (context,), generator=gen).tolist(), 0)
        for n in sizes:
            ids = torch.randint(0, high, (n,), generator=gen).tolist()
            times = []
            for _ in range(repeats + 1):
                sync()
                t0 = time.perf_counter()
                runner.verify(ids, None, None).logits.rows(list(range(n)))
                sync()
                times.append(time.perf_counter() - t0)
                runner.keep(context, [])
            medians[n] = statistics.median(times[1:])
    finally:
        runner.close()
    return _points(medians, sizes)


def _points(medians: dict[int, float], sizes: tuple[int, ...]) -> list[CostPoint]:
    """Median seconds per size as points: milliseconds and the ratio to the first size."""
    base = medians[sizes[0]]
    return [CostPoint(n, medians[n] * 1e3, medians[n] / base if base > 0 else 0.0) for n in sizes]


def _timed_pass(model: Any, ids: Any, cache: Any, cache_kw: str) -> float:
    """Seconds of one forward over ``ids`` after the cache; the cache is cropped back."""
    import torch

    sync = torch.cuda.synchronize if ids.device.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    model(ids, use_cache=True, **{cache_kw: cache})
    sync()
    seconds = time.perf_counter() - t0
    cache.crop(-ids.shape[-1])  # crop takes a negative count in transformers 5
    return seconds


def format_curve(points: list[CostPoint], title: str) -> str:
    """``title`` and a table: n, milliseconds, ratio to n = 1."""
    lines = [title, f"{'n':>4}  {'ms':>9}  {'x n=1':>7}"]
    lines += [f"{p.n:>4}  {p.ms:>9.1f}  {p.ratio:>7.2f}" for p in points]
    return "\n".join(lines) + "\n"


def curve_for(loaded: Any, settings: Any = None) -> str:
    """The verify-cost table of ``loaded`` (a :class:`~adapld_cli.model.LoadedModel`): static
    passes or eager ones as ``settings`` (default: the defaults) resolve on the model's
    device. Raises ValueError for a model with too few positions."""
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
    title = (
        f"forward cost over a {CONTEXT}-token cache, median of {REPEATS}: {loaded.name} "
        f"[{loaded.device}, {loaded.dtype}, {loaded.weights_label()}, "
        f"threads={torch.get_num_threads()}{passes}]"
    )
    points = measure(loaded.model, graphs=graphs, uniform=uniform, planes=planes, span=span)
    return format_curve(points, title)
