"""Static verification passes: one shape per size bucket, replayed as CUDA graphs on a GPU.

On a GPU an eager pass is a string of small kernel launches (hundreds per layer stack) whose
cost does not grow with the pass size; a CUDA graph replays the whole forward in one launch.
A graph fixes every shape and address, so a pass over ``n`` tree nodes runs here as a pass
over ``b`` rows, the smallest bucket of :data:`BUCKETS` that holds ``n``, against the whole
preallocated KV cache:

- inputs live in per-bucket buffers (token ids, positions, the cache rows written and the
  tree, one copy from the host a pass) from which the forward itself (so the graph, on
  replay) fills a 4D additive mask ``[1, 1, b, capacity]`` on the device;
- node ``i`` is written at cache row ``length + i`` (as an eager pass writes it) and sees the
  cached prefix, its ancestors and itself; padding rows ``n .. b-1`` carry a copy of the
  first token at the root's position and see the prefix and themselves only, so no real row
  ever sees them, and the rows they write lie past the cache's length (overwritten later);
- the cache layers return their whole buffers (:attr:`GrowingLayer.slots`), the rows past
  the length zeroed once when the passes are set up, so masked keys are finite;
- after the run the layers' length is set to ``length + n``; :meth:`ModelRunner.keep`
  compacts the accepted path as for an eager pass.

Without planes, on a model whose heads share keys (GQA) and run on transformers' sdpa
attention, a static pass attends grouped (:func:`grouped_attention`): a key head's query
heads are its query rows, so the keys are not copied per query head.

With a key span (``AdaPLDSettings.span``, :func:`key_span`) a pass attends only the cache's
first multiple of ``span`` rows past it, not the whole buffer: the keys left out are masked
for every row, and a masked key adds an exact zero (its weight is ``exp`` of a huge negative,
0, so a softmax's running maximum, sum and output are unchanged), while the attention and the
key planes' copies cost in proportion to the keys read. Each (shape, span) pair is a bucket
of its own: a graph per span in use.

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
of every method, the LM head over all its rows) no kernel sees a pass's size:
every product runs at one shape, so a row cannot depend on how many rows came with it, on
kernels that are not batch-invariant too. Attention would still see a node's place: on the
draft tree's first-child chain its keys lie where ``ar`` puts them, but a branch node sits a
few rows further on, and an attention kernel's reduction order sees that (torch's stock
float32 kernels on the real model: chain rows bitwise equal, branch rows not). With
``planes`` (``AdaPLDSettings.planes``) each row attends its own key plane
(:func:`planes_attention`): the keys in the order plain decoding has them, one batch item
per row, at one shape; the planes are kept from pass to pass (:class:`KeyPlanes`), so a pass
copies only its own rows and those accepted since the last. The bench measures both on a
GPU (``adapld bench --set uniform=true --methods ar,adapld``; ``scripts/gpu/gpu_exact.py``).
"""

from __future__ import annotations

import os
import weakref
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from adapld_cli.engine.transfer import to_device
from adapld_cli.engine.tree import ancestor_rows

ENV_CAPTURE_CUDNN = "ADAPLD_CAPTURE_CUDNN"  # "0": captures keep the process's attention flags
ENV_KEPT_PLANES = "ADAPLD_KEPT_PLANES"  # "0": key planes gathered whole every pass
KEPT_PLANES_SHARE = 0.5  # kept key planes may take this share of the device's free memory
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


def key_span(length: int, rows: int, step: int, capacity: int) -> int:
    """The keys a static pass of ``rows`` rows at a cache of ``length`` attends: the first
    multiple of ``step`` holding ``length + rows``, at most ``capacity`` (``step`` 0: all)."""
    if step <= 0:
        return capacity
    return min(capacity, -(-(length + rows) // step) * step)


@dataclass
class _Bucket:
    staged: torch.Tensor  # [3 + b, b] int64: the pass's one copy from the host (rows below)
    ids: torch.Tensor  # [1, b] int64 token ids (staged row 0)
    pos: torch.Tensor  # [1, b] int64 positions (row 1)
    slots: torch.Tensor  # [b] int64 cache rows written (row 2; the first is the length)
    see: torch.Tensor  # [b, b] int64: row i sees tree row j (rows 3 ..)
    span: int  # s: the keys the pass attends (the cache's first s rows)
    rows: torch.Tensor  # [1, 1, b, s rounded up to 16] additive mask storage
    mask: torch.Tensor  # [1, 1, b, s] a view of it, made anew for every pass
    out: torch.Tensor | None = None  # [b, H] final hidden states of the last run
    hidden: torch.Tensor | None = None  # [b, H] the hooked layer's states, or None
    graph: Any = None  # torch.cuda.CUDAGraph once captured
    seen: torch.Tensor | None = None  # [b, 1, 1, s] key planes: row i's mask over its plane
    gather: torch.Tensor | None = None  # [b, s] int64: planes gathered whole, row i's keys
    src: torch.Tensor | None = None  # [b, 2b] int64: kept planes, the cache rows each copies
    dst: torch.Tensor | None = None  # [2b] int64: ... into these rows of every plane
    kept: KeyPlanes | None = None  # the kept planes (KeyPlanes), or None: gathered
    grouped: torch.Tensor | None = None  # [1, 1, G * b, s]: grouped heads, the mask per head


# a static pass's mask storage (data pointer) -> its bucket, while the bucket lives
_PASSES: weakref.WeakValueDictionary[int, _Bucket] = weakref.WeakValueDictionary()
STATIC = "adapld_static"  # static_attention's name in transformers' AttentionInterface


def attention_groups(config: Any) -> int:
    """Query heads per key head where static passes run the attention grouped
    (:func:`grouped_attention`): a model on transformers' sdpa attention whose heads share
    keys (GQA); else 0 (the model's own attention runs, e.g. the exact CPU kernels')."""
    heads = getattr(config, "num_attention_heads", None)
    kv = getattr(config, "num_key_value_heads", None) or heads
    if getattr(config, "_attn_implementation", None) != "sdpa" or not heads or heads <= kv:
        return 0
    return heads // kv


def static_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """The attention of static passes (transformers' attention interface; shapes: ``query
    [1, H, b, d]``, ``key`` / ``value`` ``[1, KV, s, d]``, the static cache's first ``s``
    rows, output ``[1, b, H, d]``): :func:`planes_attention` for a pass with key planes,
    :func:`grouped_attention` for one with grouped heads, transformers' sdpa attention for
    any other call."""
    buf = None if attention_mask is None else _PASSES.get(attention_mask.data_ptr())
    if buf is not None and query.shape[0] == 1:
        if buf.seen is not None:
            return planes_attention(buf, (query, key, value), scaling), None
        if buf.grouped is not None:
            return grouped_attention(buf, (query, key, value), scaling), None
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
    )


def grouped_attention(buf: _Bucket, qkv: tuple[torch.Tensor, ...], scaling: Any) -> torch.Tensor:
    """Attention of a static pass whose heads share keys, without copying them: a key head's
    ``G`` query heads become its query rows (``[1, KV, G * b, d]``, the pass's mask repeated
    per head) against the cache's own ``[1, KV, s, d]``. Transformers' sdpa attention copies
    the keys and values once per query head instead (``repeat_kv``: with a mask, torch's
    ``enable_gqa`` takes its math backend), a share of a replayed pass the GPU profile
    measured (docs/design.md, "Grouped heads"). Each row is computed alone at one shape
    whatever the other rows, so a row on the draft tree's first-child chain is the single
    step's as before (``uniform``)."""
    assert buf.grouped is not None
    query, key, value = qkv
    b, heads, kv, d = query.shape[2], query.shape[1], key.shape[1], query.shape[3]
    q = query.reshape(1, kv, heads // kv * b, d)  # head kv * G + g's row i at g * b + i
    out = torch.nn.functional.scaled_dot_product_attention(
        q, key, value, attn_mask=buf.grouped, scale=scaling
    )  # [1, KV, G * b, d]
    return out.reshape(1, heads, b, d).transpose(1, 2).contiguous()


def planes_attention(buf: _Bucket, qkv: tuple[torch.Tensor, ...], scaling: Any) -> torch.Tensor:
    """Attention of a static pass with key planes: each of the ``b`` query rows attends its
    own copy of the keys, laid out as plain decoding lays them out for that token (the cached
    prefix, then its ancestors in depth order, then itself; nothing else visible), one batch
    item per row. A row's attention then has the very inputs of a single-token step at its
    position, so a branch node's row is exact too where the kernel computes each batch item
    independently of the others (torch's CPU kernel does not always: docs/design.md, "Key
    planes").
    The planes are kept from pass to pass (:class:`KeyPlanes`: only the pass's rows are
    copied) or, without them, gathered whole from the cache. Shapes as
    :func:`static_attention`'s (``qkv``: its query, key and value)."""
    assert buf.seen is not None
    query, key, value = qkv
    b, heads, kv, d = query.shape[2], query.shape[1], key.shape[1], query.shape[3]
    # a key head's query heads as its query rows ([b, KV, H / KV, d]; transformers' grouping:
    # head h reads key head h // (H / KV)): no enable_gqa, which with a mask sends torch to
    # its math backend and a copy of the keys per query head
    q = query[0].transpose(0, 1).reshape(b, kv, heads // kv, d)
    if buf.kept is not None:
        k, v = buf.kept.planes(buf, key, value)
    else:
        assert buf.gather is not None
        k = key[0].transpose(0, 1)[buf.gather].transpose(1, 2)  # [b, KV, s, d]
        v = value[0].transpose(0, 1)[buf.gather].transpose(1, 2)
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=buf.seen, scale=scaling
    )  # [b, KV, H / KV, d]
    return out.reshape(b, heads, d).unsqueeze(0)


class KeyPlanes:
    """Key planes kept from pass to pass, so a pass copies its own rows only.

    Gathered whole, row ``i``'s plane is a copy of every key it attends: ``b x s`` rows a
    layer and pass, written and read again before the attention reads it (docs/design.md,
    "Kept key planes"). But a plane is the cache's prefix
    followed by the row's ancestors, and the prefix changes only where the cache does (the
    rows a pass accepted, at most ``b``). So here each layer keeps ``b`` planes ``[b, KV,
    capacity, d]`` (keys and values) and a pass writes ``2b`` rows of each, inside the
    captured forward: the ``b`` cache rows before the pass's (a window that holds every row
    accepted since the last pass, copied to every plane) and the pass's own ``b`` rows in the
    row's order (its ancestors first, as :func:`planes_attention` gathered them). Cache rows
    changed further back (a new generation in the workspace, an eager pass) are copied before
    the pass (:meth:`sync`, from :attr:`GrowingLayer.low`). The rows a row sees are the
    gathered plane's bit for bit; the rows it does not see hold older finite keys where the
    gathered plane had others, all masked, and a masked key adds an exact zero (key spans'
    argument). For one pass shape (``uniform``); costs ``b`` times the cache's memory, so it
    is used where that fits :data:`KEPT_PLANES_SHARE` of the free memory
    (:meth:`fits`; ``ADAPLD_KEPT_PLANES=0``: gathered, a measurement's other arm)."""

    def __init__(self, layers: list[Any], rows: int) -> None:
        self.rows = rows  # b: the pass shape, one plane per row
        self.k = [layer._k.new_zeros((rows, *layer._k.shape[1:])) for layer in layers]
        self.v = [layer._v.new_zeros((rows, *layer._v.shape[1:])) for layer in layers]
        self._layer = {layer._k.data_ptr(): i for i, layer in enumerate(layers)}
        for layer in layers:  # every plane is zeros: copy all the cache's rows first
            layer.low = 0

    @staticmethod
    def fits(layers: list[Any], rows: int, device: Any) -> bool:
        """Whether planes of ``rows`` rows over ``layers`` may be kept (module constants)."""
        if os.environ.get(ENV_KEPT_PLANES, "1") == "0":
            return False
        need = rows * sum(layer._k.nbytes + layer._v.nbytes for layer in layers)
        return need <= KEPT_PLANES_SHARE * _free_bytes(device)

    def sync(self, layers: list[Any], length: int) -> None:
        """Before a pass at ``length``: copy the cache rows that changed since a pass last read
        them and that the pass's own window (the ``b`` rows before ``length``) will not."""
        lo = min(layer.low for layer in layers)
        if lo < length - self.rows:
            for layer, k, v in zip(layers, self.k, self.v, strict=True):
                k[:, :, lo:length] = layer._k[:, :, lo:length]  # [1, ...] to every plane
                v[:, :, lo:length] = layer._v[:, :, lo:length]
        for layer in layers:  # the pass reads rows up to here; it and keep write past them
            layer.low = length

    def fill(self, buf: _Bucket, order: torch.Tensor, length: torch.Tensor) -> None:
        """A pass's row indices (device work): every plane copies the window ``length - b ..
        length - 1`` (clamped at row 0) of the cache, then plane ``i`` copies the pass's rows
        in ``order[i]`` (``[b, b]``: its ancestors and itself first) to ``length ..``
        (``length``: ``[1]`` on the device)."""
        assert buf.src is not None and buf.dst is not None
        b = self.rows
        window = (buf.slots - b).clamp_(min=0)  # [b]: length - b .. length - 1
        buf.dst[:b] = window
        buf.dst[b:] = buf.slots
        buf.src[:, :b] = window
        buf.src[:, b:] = order + length

    def planes(
        self, buf: _Bucket, key: torch.Tensor, value: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the pass's rows into the planes of ``key``'s layer (the cache's first ``s``
        rows, ``[1, KV, s, d]``, the pass's written) and return them, ``[b, KV, s, d]``."""
        assert buf.src is not None and buf.dst is not None
        i, s = self._layer[key.data_ptr()], key.shape[2]
        for plane, new in ((self.k[i], key), (self.v[i], value)):
            rows = new[0].index_select(1, buf.src.flatten())  # [KV, b * 2b, d]
            plane.index_copy_(2, buf.dst, rows.unflatten(1, buf.src.shape).transpose(0, 1))
        return self.k[i][:, :, :s], self.v[i][:, :, :s]


def _free_bytes(device: Any) -> int:
    """Free memory on ``device`` (a CPU: the machine's available memory)."""
    if torch.device(device).type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):  # no such figure here: keep nothing
        return 0


def captured_attention() -> Any:
    """A context in which ``scaled_dot_product_attention`` may use every backend, cuDNN's
    first, whatever the process-wide flags say: for the warm-up and capture of a static
    pass. :func:`adapld_cli.model.placement.tune_attention` switches cuDNN off for eager
    passes, where it pays an execution-graph build on every new shape; a captured graph
    pays that once per shape, and cuDNN's kernel was the fastest there (docs/design.md,
    "cuDNN attention"). A backend that
    cannot run a call is passed over for the next. ``ADAPLD_CAPTURE_CUDNN=0`` leaves the
    process-wide flags as they are (a measurement's other arm)."""
    if os.environ.get(ENV_CAPTURE_CUDNN, "1") == "0":
        return nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    order = [
        SDPBackend.CUDNN_ATTENTION,
        SDPBackend.FLASH_ATTENTION,
        SDPBackend.EFFICIENT_ATTENTION,
        SDPBackend.MATH,
    ]
    try:
        return sdpa_kernel(order, set_priority=True)
    except TypeError:  # a torch without priorities: its own order among all four
        return sdpa_kernel(order)


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(STATIC, static_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(STATIC, sdpa_mask)


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
        config: Any = None,
        planes: bool = False,
        span: int = 0,
    ):
        self.layers = layers
        self.shapes = shapes  # the pass sizes run, ascending
        self.planes = planes  # rows attend key planes (planes_attention; needs ``config``)
        # query heads per key head, attended grouped (grouped_attention; 0: not so)
        self.groups = 0 if planes else attention_groups(config)
        # the model config whose attention runs as static_attention in these passes, or None
        self.config = config if planes or self.groups else None
        if self.config is not None:
            _register()
        self.span = span  # key span step (key_span; 0: every pass attends the whole cache)
        self.forward = forward  # the owning runner's (reset when a runner takes it over)
        self.device, self.dtype = device, dtype
        self.capture = capture
        self.capacity = min(layer.capacity for layer in layers)
        self._cols = torch.arange(self.capacity, device=device)  # key rows (key planes)
        self.kept: KeyPlanes | None = None  # key planes kept between passes (one shape)
        if planes and len(shapes) == 1 and KeyPlanes.fits(layers, shapes[0], device):
            self.kept = KeyPlanes(layers, shapes[0])
        self._ptrs = self._pointers()
        self._buckets: dict[tuple[int, int], _Bucket] = {}  # (rows, span) -> its buffers
        self._pool: Any = None
        self.fallback = ""  # why a capture failed ("" = none did)
        self.runs = 0  # passes run here (eager or replayed)
        self.replays = 0  # ... of them from a captured graph
        self.firsts = 0  # ... the first of their (shape, span) bucket (on a GPU: captured)
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

    def _bucket(self, b: int, s: int) -> _Bucket:
        """The buffers (and graph) of passes of ``b`` rows attending ``s`` keys."""
        if (b, s) not in self._buckets:
            i64 = dict(dtype=torch.int64, device=self.device)
            width = -(-s // 16) * 16
            rows = torch.empty((1, 1, b, width), dtype=self.dtype, device=self.device)
            staged = torch.zeros((3 + b, b), **i64)
            buf = _Bucket(
                staged=staged,
                ids=staged[0:1],
                pos=staged[1:2],
                slots=staged[2],
                see=staged[3:],
                span=s,
                # rows 16-aligned (what fused attention kernels want of a mask), cut to width
                rows=rows,
                mask=rows[..., :s],
            )
            if self.planes:
                buf.seen = torch.zeros((b, 1, 1, s), dtype=self.dtype, device=self.device)
                if self.kept is not None:
                    buf.kept = self.kept
                    buf.src, buf.dst = torch.zeros((b, 2 * b), **i64), torch.zeros(2 * b, **i64)
                else:
                    buf.gather = torch.zeros((b, s), **i64)
            elif self.groups:
                grouped = torch.empty(
                    (1, 1, self.groups * b, width), dtype=self.dtype, device=self.device
                )
                buf.grouped = grouped[..., :s]
            if self.config is not None:
                _PASSES[rows.data_ptr()] = buf
            self._buckets[b, s] = buf
        return self._buckets[b, s]

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
        span = key_span(length, b, self.span, self.capacity)
        self.firsts += (b, span) not in self._buckets
        buf = self._bucket(b, span)
        if self.kept is not None:
            self.kept.sync(self.layers, length)
        self._stage(buf, ids, parents, depths, length)
        # a new view object of the same memory each pass: what a graph reads is unchanged, and
        # whatever keys derived data on the mask object (the exact kernels' per-pass attention
        # plan) sees a new mask
        buf.mask = buf.rows[..., : buf.span]
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

    def prepare(self) -> int:
        """Run a pass (on a GPU: capture its graph) for every key span the cache can reach and
        no pass has used yet, so that a generation that crosses into a new span later does not
        pay the capture then (a warm-up's job: the bench's, before its first task). Only for
        one pass shape; each is a pass of token 0 at the span's last rows, the cache's own
        length, counts and planes' state restored after (the next pass copies every row into
        the key planes again). Returns how many passes it ran."""
        if len(self.shapes) != 1:
            return 0
        b = self.shapes[0]
        step = self.span or self.capacity
        spans = {min(s, self.capacity) for s in range(step, self.capacity + step, step)}
        todo = sorted(s for s in spans if (b, s) not in self._buckets and s - b >= 1)
        length, counts = self.layers[0].get_seq_length(), (self.runs, self.replays, self.firsts)
        for s in todo:
            for layer in self.layers:
                layer.set_length(s - b)  # rows past the real length: finite, never read
            self.run([0] * b, None, None)
        for layer in self.layers:
            layer.set_length(length)
            layer.low = 0
        self.runs, self.replays, self.firsts = counts
        return len(todo)

    def _stage(
        self,
        buf: _Bucket,
        ids: list[int],
        parents: list[int] | None,
        depths: list[int] | None,
        length: int,
    ) -> None:
        """The pass's inputs onto the device in one copy into :attr:`_Bucket.staged`, queued
        (no wait for the GPU): ids, positions, the cache rows written and the tree (padding
        rows repeat the first token at the root's position and see only themselves). All
        the rest is :meth:`_fill`'s, inside the captured forward."""
        n, b = len(ids), buf.ids.shape[1]
        host = np.empty((3 + b, b), dtype=np.int64)  # numpy: cheaper host work than torch's
        host[0, :n], host[0, n:] = ids, ids[0]  # ids, padding repeating the first
        host[1, :n] = length + (np.arange(n) if depths is None else np.asarray(depths))
        host[1, n:] = length  # positions
        host[2] = np.arange(length, length + b)  # the cache rows written
        host[3:] = np.eye(b, dtype=np.int64)  # row i sees tree row j; padding only itself
        host[3 : 3 + n, :n] = ancestor_rows(parents, n)
        to_device(torch.from_numpy(host), self.device, out=buf.staged)

    def _fill(self, buf: _Bucket) -> None:
        """The pass's masks (and key planes' indices) from its staged inputs, all of it work
        on the device with the cache's length read there (``slots[0]``), so a captured
        graph does it on replay and the host launches nothing but the copy and the replay:
        row ``i`` sees the cached prefix and the tree rows ``see[i]`` at ``length ..``."""
        b = buf.ids.shape[1]
        length = buf.slots[:1]  # [1] on the device
        cols = self._cols[: buf.span]  # [s]
        see = buf.see != 0  # [b, b]
        low = torch.finfo(self.dtype).min
        mask = buf.mask[0, 0]  # [b, s]
        mask.fill_(low)
        mask.masked_fill_(cols < length, 0)
        block = torch.full((b, b), low, dtype=self.dtype, device=self.device)
        mask.scatter_(1, buf.slots.expand(b, -1), block.masked_fill_(see, 0))
        if buf.seen is not None:
            self._fill_planes(buf, see, length)
        if buf.grouped is not None:  # the mask once per query head of a key head
            buf.grouped[0, 0].unflatten(0, (self.groups, b)).copy_(mask.expand(self.groups, -1, -1))

    def _fill_planes(self, buf: _Bucket, see: torch.Tensor, length: torch.Tensor) -> None:
        """Row ``i``'s key plane: the prefix, then its ancestors and itself in tree order (the
        drafter's depth-first order puts an ancestor before its descendants, so ascending
        rows are ascending depths) at rows ``length ..``, visible up to its own position.
        ``see [b, b]`` and ``length [1]`` on the device; all of it device work."""
        assert buf.seen is not None
        b = see.shape[0]
        cols = self._cols[: buf.span]  # [s]
        order = torch.where(see, cols[:b], b + cols[:b]).argsort(dim=1)  # [b, b]: seen first
        if buf.kept is not None:
            buf.kept.fill(buf, order, length)
        else:
            assert buf.gather is not None
            buf.gather.copy_(cols.expand(b, -1))
            buf.gather.scatter_(1, buf.slots.expand(b, -1), order + length)
        visible = cols <= buf.pos[0][:, None]  # [b, s]: up to the row's position
        seen = buf.seen[:, 0, 0]
        seen.fill_(torch.finfo(self.dtype).min)
        seen.masked_fill_(visible, 0)

    def _run(self, buf: _Bucket) -> tuple[torch.Tensor, torch.Tensor | None]:
        self._fill(buf)
        for layer in self.layers:
            layer.slots, layer.span = buf.slots, buf.span
        config = self.config
        before = None if config is None else config._attn_implementation
        if config is not None:
            config._attn_implementation = STATIC
        try:
            return self.forward(buf.ids, buf.pos, buf.mask)
        finally:
            for layer in self.layers:
                layer.slots, layer.span = None, None
            if config is not None:
                config._attn_implementation = before

    def _capture(self, buf: _Bucket) -> None:
        """Capture the bucket's forward (its inputs are filled: the warm-up computes this
        pass, the replay computes it again), or run it eagerly when capture fails."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), captured_attention():
            buf.out, buf.hidden = self._run(buf)  # warm-up: allocations, lazy inits
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, pool=self._pool), captured_attention():
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
