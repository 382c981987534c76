"""Static verification passes: one shape per size bucket, replayed as CUDA graphs on a GPU.

On a GPU an eager pass is a string of small kernel launches (hundreds per layer stack) whose
cost does not grow with the pass size; a CUDA graph replays the whole forward in one launch.
A graph fixes every shape and address, so a pass over ``n`` tree nodes runs here as a pass
over ``b`` rows, the smallest bucket of :data:`BUCKETS` that holds ``n``, against the whole
preallocated KV cache:

- inputs live in per-bucket buffers (token ids, positions, the cache rows written, a 4D
  additive mask ``[1, 1, b, capacity]``) filled before each run, on the device;
- node ``i`` is written at cache row ``length + i`` (as an eager pass writes it) and sees the
  cached prefix, its ancestors and itself; padding rows ``n .. b-1`` carry a copy of the
  first token at the root's position and see the prefix and themselves only, so no real row
  ever sees them, and the rows they write lie past the cache's length (overwritten later);
- the cache layers return their whole buffers (:attr:`GrowingLayer.slots`), the rows past
  the length zeroed once when the passes are set up, so masked keys are finite;
- after the run the layers' length is set to ``length + n``; :meth:`ModelRunner.keep`
  compacts the accepted path as for an eager pass.

With ``capture`` (CUDA) each bucket's forward is captured on first use (one warm-up run on a
side stream, then :class:`torch.cuda.CUDAGraph`, all buckets sharing one memory pool) and
replayed after; when a capture fails every later pass runs eagerly (same static shapes)
and :attr:`StaticPasses.fallback` says why. Without ``capture`` the same static passes run
eagerly: that is what the CPU tests exercise (losslessness against plain decoding), and it
is slower than the dynamic path on a CPU, so nothing else uses it there.

Exactness: a static pass computes each real row from the same tokens, positions and visible
keys as an eager one; masked keys add exact zeros. Whether the GPU's kernels give the same
bits for a ``b``-row and a 1-row input is what the bench's ``= ar`` check measures
(``adapld bench --methods ar,ar-graphs,adapld-graphs``).

With ``shapes`` of one size (``AdaPLDSettings.uniform``: :func:`uniform_shape`, every pass
of every method, the LM head over all its rows) no kernel sees a pass's size: every product
and every attention runs at one shape over the same keys' width, so a row cannot depend on
how many rows came with it, on kernels that are not batch-invariant too. What is left is a
node's keys' places: on the draft tree's first-child chain they are the places ``ar`` gives
them; a branch node sits a few rows further on (its keys are the same, the masked rows
between add zeros), which an attention kernel's reduction order could still see. On a CPU
torch's stock bfloat16 kernels emit ``ar``'s tokens so (tests); on a GPU the bench measures
it (``adapld bench --set uniform=true --methods ar,adapld``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from adapld_cli.engine.tree import ancestors

# pass sizes: a root plus 0, 1, 2, 4, ..., 128 draft nodes (node_budget 64 -> 65)
BUCKETS = (1, 2, 3, 5, 9, 17, 33, 65, 129)


def bucket(n: int, shapes: tuple[int, ...] = BUCKETS) -> int | None:
    """The smallest of ``shapes`` (ascending) holding ``n`` rows, or None when ``n`` is larger
    than all."""
    return next((b for b in shapes if b >= n), None)


def uniform_shape(node_budget: int) -> int:
    """The one pass shape of ``AdaPLDSettings.uniform``: the largest pass (the root and
    ``node_budget`` nodes) rounded up to whole 16-row blocks of the LM head."""
    return -(-(node_budget + 1) // 16) * 16


@dataclass
class _Bucket:
    ids: torch.Tensor  # [1, b] int64 token ids
    pos: torch.Tensor  # [1, b] int64 positions
    slots: torch.Tensor  # [b] int64 cache rows written
    rows: torch.Tensor  # [1, 1, b, capacity rounded up to 16] additive mask storage
    mask: torch.Tensor  # [1, 1, b, capacity] a view of it, made anew for every pass
    out: torch.Tensor | None = None  # [b, H] final hidden states of the last run
    hidden: torch.Tensor | None = None  # [b, H] the hooked layer's states, or None
    graph: Any = None  # torch.cuda.CUDAGraph once captured


class StaticPasses:
    """Static-shape verification passes over a runner's cache (module docstring).

    ``forward(ids, pos, mask)`` runs the model's decoder on ``[1, b]`` inputs with the cache
    layers writing at the bucket's slots and returns ``(last [b, H], hooked [b, H] or None)``.
    """

    def __init__(
        self,
        layers: list[Any],
        forward: Any,
        device: Any,
        dtype: Any,
        capture: bool,
        shapes: tuple[int, ...] = BUCKETS,
    ):
        self.layers = layers
        self.shapes = shapes  # the pass sizes run, ascending
        self.forward = forward  # the owning runner's (reset when a runner takes it over)
        self.device, self.dtype = device, dtype
        self.capture = capture
        self.capacity = min(layer.capacity for layer in layers)
        self._ptrs = self._pointers()
        self._buckets: dict[int, _Bucket] = {}
        self._pool: Any = None
        self.fallback = ""  # why a capture failed ("" = none did)
        self.runs = 0  # passes run here (eager or replayed)
        self.replays = 0  # ... of them from a captured graph
        for layer in layers:
            layer.clear_tail()

    def _pointers(self) -> list[int]:
        return [layer._k.data_ptr() for layer in self.layers]

    @property
    def valid(self) -> bool:
        """False once the cache has been reallocated (grown): the buffers moved."""
        return self._pointers() == self._ptrs

    def fits(self, n: int) -> bool:
        """Whether a pass over ``n`` nodes runs here now (a shape holds it, the cache has the
        room; :meth:`rows_needed` says how much room)."""
        need = self.rows_needed(n)
        return need is not None and need <= self.capacity

    def rows_needed(self, n: int) -> int | None:
        """Cache rows a pass over ``n`` nodes writes up to, or None when no shape holds it."""
        b = bucket(n, self.shapes)
        return None if b is None else self.layers[0].get_seq_length() + b

    def _bucket(self, b: int) -> _Bucket:
        if b not in self._buckets:
            i64 = dict(dtype=torch.int64, device=self.device)
            width = -(-self.capacity // 16) * 16
            rows = torch.empty((1, 1, b, width), dtype=self.dtype, device=self.device)
            self._buckets[b] = _Bucket(
                ids=torch.zeros((1, b), **i64),
                pos=torch.zeros((1, b), **i64),
                slots=torch.zeros(b, **i64),
                # rows 16-aligned (what fused attention kernels want of a mask), cut to width
                rows=rows,
                mask=rows[..., : self.capacity],
            )
        return self._buckets[b]

    def run(
        self, ids: list[int], parents: list[int] | None, depths: list[int] | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One pass over tree nodes ``ids`` (``parents`` / ``depths`` None = a chain): the
        final hidden states ``[b, H]`` and the hooked layer's ``[b, H]`` (or None) of the
        bucket's ``b`` rows, the nodes' first (views of the bucket's outputs, valid until the
        next run of that bucket)."""
        n = len(ids)
        b = bucket(n, self.shapes)
        assert b is not None and self.fits(n) and self.valid
        length = self.layers[0].get_seq_length()
        buf = self._bucket(b)
        self._fill(buf, ids, parents, depths, length)
        self.runs += 1
        if buf.graph is not None:
            buf.graph.replay()
            self.replays += 1
        elif self.capture:
            self._capture(buf)
        else:
            buf.out, buf.hidden = self._run(buf)
        for layer in self.layers:
            layer.set_length(length + n)
        assert buf.out is not None
        return buf.out, buf.hidden

    def _fill(
        self,
        buf: _Bucket,
        ids: list[int],
        parents: list[int] | None,
        depths: list[int] | None,
        length: int,
    ) -> None:
        n, b = len(ids), buf.ids.shape[1]
        depth = list(range(n)) if depths is None else list(depths)
        host = torch.tensor(
            [
                ids + [ids[0]] * (b - n),
                [length + d for d in depth] + [length] * (b - n),
                list(range(length, length + b)),
            ],
            dtype=torch.int64,
        )  # [3, b]
        see = torch.eye(b, dtype=torch.bool)  # see[i, j]: row i sees tree row j
        see[:n, :n] = ancestors(parents, n)  # padding rows see only themselves
        dev = host.to(self.device)
        buf.ids.copy_(dev[0:1])
        buf.pos.copy_(dev[1:2])
        buf.slots.copy_(dev[2])
        # a new view object of the same memory each pass: what a graph reads is unchanged, and
        # whatever keys derived data on the mask object (the exact kernels' per-pass attention
        # plan) sees a new mask
        buf.mask = buf.rows[..., : self.capacity]
        mask = buf.mask[0, 0]  # [b, capacity]
        mask.fill_(torch.finfo(self.dtype).min)
        mask[:, :length] = 0
        mask[:, length : length + b].masked_fill_(see.to(self.device), 0)

    def _run(self, buf: _Bucket) -> tuple[torch.Tensor, torch.Tensor | None]:
        for layer in self.layers:
            layer.slots = buf.slots
        try:
            return self.forward(buf.ids, buf.pos, buf.mask)
        finally:
            for layer in self.layers:
                layer.slots = None

    def _capture(self, buf: _Bucket) -> None:
        """Capture the bucket's forward (its inputs are filled: the warm-up computes this
        pass, the replay computes it again), or run it eagerly when capture fails."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            buf.out, buf.hidden = self._run(buf)  # warm-up: allocations, lazy inits
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, pool=self._pool):
                out, hidden = self._run(buf)
        except Exception as exc:  # noqa: BLE001 - any capture failure leaves the bucket eager
            self.capture = False
            self.fallback = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            torch.cuda.synchronize()
            buf.out, buf.hidden = self._run(buf)
            return
        self._pool = graph.pool()
        buf.graph, buf.out, buf.hidden = graph, out, hidden
        graph.replay()
        self.replays += 1
