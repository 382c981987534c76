"""Static-pass workspaces kept between generations: a preallocated KV cache and the static
passes (on a GPU, the captured graphs) made over it.

Contract: a :class:`Workspaces` holds, per model and per pass layout (hooked layer, pass
shapes, key planes, key span), one workspace that the next generation of that layout may
take over while it is free, so its graphs replay again instead of being captured anew. A
workspace serves only a generation whose cache rounds up to the same number of rows
(:func:`workspace_rows`): the cache's width is a shape every pass's kernels see, so it is a
function of that generation alone, and what ran before never changes the output. Hold one
:class:`Workspaces` where generations on a model follow one another (an edit session, a
server's worker, a benchmark), as a :class:`~adapld_cli.engine.prefix.PrefixCache` is
held; a runner given none makes its own, dropped with it. A workspace is busy while a
runner holds it: a second runner alive at the same time gets a cache of its own. Entries
are dropped with their model.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from adapld_cli.engine.graphs import StaticPasses

# Workspace caches are made for a multiple of this many rows, so that the next generations on
# the model fit the same cache (and replay the graphs captured for it): on a GPU one step
# holds a typical edit and a benchmark's short warm-up alike (masked keys are nearly free
# there); on a CPU, where static passes run in tests only, a smaller one.
WORKSPACE_ROWS = 1024
GPU_WORKSPACE_ROWS = 4096


def workspace_rows(capacity: int, device_type: str) -> int:
    """``capacity`` rounded up to whole workspace steps on a device of this type."""
    step = GPU_WORKSPACE_ROWS if device_type == "cuda" else WORKSPACE_ROWS
    return -(-capacity // step) * step


@dataclass
class Workspace:
    """One kept static-pass cache: ``capacity`` rows, its static passes once made."""

    cache: Any  # a DynamicCache of GrowingLayer layers (engine/kvcache.py)
    capacity: int
    static: StaticPasses | None = None
    busy: bool = False  # a runner holds it (until the runner's close)


class Workspaces:
    """Workspaces per model and pass layout (module contract)."""

    def __init__(self) -> None:
        # model -> layout key -> its workspace (dropped with the model)
        self._spaces: weakref.WeakKeyDictionary[Any, dict[Any, Workspace]] = (
            weakref.WeakKeyDictionary()
        )

    def take(
        self, model: Any, key: tuple[Any, ...], rows: int, new_cache: Callable[[int], Any]
    ) -> Workspace:
        """A workspace of ``rows`` rows for ``model`` and layout ``key``, marked busy: the
        kept one, its cache emptied, when it is free and of that size; else a new one from
        ``new_cache(rows)``, kept for the next generation unless the kept one is busy."""
        spaces = self._spaces.setdefault(model, {})
        ws = spaces.get(key)
        if ws is None or ws.busy or ws.capacity != rows:
            ws = Workspace(new_cache(rows), rows)
            if key not in spaces or not spaces[key].busy:
                spaces[key] = ws
        else:
            for layer in ws.cache.layers:
                layer.reset()
        ws.busy = True
        return ws

    def of(self, model: Any) -> dict[Any, Workspace]:
        """The workspaces kept for ``model``, by layout key (a copy of the mapping)."""
        return dict(self._spaces.get(model, {}))

    def prepare(self) -> int:
        """Before the next generations: run (on a GPU: capture) a static pass for every key
        span that a free workspace's cache can reach and no pass has used yet
        (:meth:`StaticPasses.prepare`); returns how many. A warm-up's job (the bench's)."""
        import torch

        count = 0
        with torch.inference_mode():
            for spaces in list(self._spaces.values()):
                for ws in spaces.values():
                    if ws.static is not None and ws.static.valid and not ws.busy:
                        count += ws.static.prepare()
        return count
