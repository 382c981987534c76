"""Model adapter: one forward pass over new tokens with a KV cache, and what the drafters
need from it (a middle layer's hidden states, top-K next-token predictions).

The adapter knows Hugging Face decoder-only models (Llama, Qwen2, GPT-2 and others that take
``position_ids``, a 4D float attention mask and a ``DynamicCache``, here one whose layers are
written in place, :mod:`adapld_cli.engine.kvcache`); it knows nothing of drafting. Hidden
states are captured by a forward hook on one decoder layer, never by asking the model for
every layer's states. Prefill computes top-K in chunks: full prompt x vocab
logits are never materialised.
"""

from __future__ import annotations

import inspect
import weakref
from dataclasses import dataclass
from typing import Any

import torch

from adapld_cli.compat import cache_keyword
from adapld_cli.engine.graphs import BUCKETS, StaticPasses
from adapld_cli.engine.prefix import PrefixCache
from adapld_cli.engine.transfer import to_device
from adapld_cli.engine.tree import tree_mask
from adapld_cli.engine.types import UnsupportedModelError

# Prompt tokens per prefill pass. Measured on coder-1.5b (bf16, exact kernels, 2 threads; 800-
# and 1,024-token prompts, 3 runs): 256 runs at 123-129 tok/s, 384 at 106-116, 512 at 113, 128 at
# ~100. Every decoding method shares the prefill, so the chunk never affects exactness.
PREFILL_CHUNK = 256


# Static-pass caches are made for a multiple of this many rows, so that the next generations
# on the model fit the same cache (and replay the graphs captured for it): on a GPU a step
# that takes every edit up to ~4k tokens and the bench's short warm-up into one workspace
# (masked keys are nearly free there), on a CPU (tests only) a smaller one.
WORKSPACE_ROWS = 1024
GPU_WORKSPACE_ROWS = 4096

# Vocabulary entries per block of :func:`topk_ids`' first pass (a row's maximum per block).
TOPK_BLOCK = 128


def topk_ids(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Ids ``[n, k]`` of the ``k`` largest of each row of ``logits [n, V]``, largest first
    (the values of ``logits.topk(k).indices``; among equal values either may come first).

    On a CPU, torch's ``topk`` over a 151,936-entry vocabulary costs ~0.14 ms a row (2
    threads): the per-pass top-K of the accepted rows was most of the engine's own work per
    pass. Here in float32: each row's maximum per block of :data:`TOPK_BLOCK` entries, the
    ``k`` best blocks (every one of the ``k`` largest entries lies in one of them), then the
    ``k`` best of those blocks' entries: 6-8x faster for 13-45 rows. Elsewhere (CUDA): torch's
    own."""
    n, vocab = logits.shape
    c = TOPK_BLOCK
    if logits.device.type != "cpu" or vocab < c * (k + 1) or n == 0:
        return logits.topk(k, dim=-1).indices
    if n > 64 and logits.dtype != torch.float32:  # bound the float32 copy (a prefill chunk)
        return torch.cat([topk_ids(logits[i : i + 64], k) for i in range(0, n, 64)])
    x = logits.float().contiguous()  # no copy when it is float32 already
    full = vocab // c
    body = x.as_strided((n, full, c), (vocab, c, 1))  # [n, blocks, c]
    maxes = body.amax(-1)  # [n, blocks (+ 1: the tail)]
    if full * c < vocab:
        maxes = torch.cat([maxes, x[:, full * c :].amax(-1, keepdim=True)], 1)
    best = maxes.topk(k, dim=-1).indices  # [n, k] block ids
    ids = (best[..., None] * c + torch.arange(c)).reshape(n, k * c)  # candidates
    vals = x.gather(1, ids.clamp(max=vocab - 1))
    vals.masked_fill_(ids >= vocab, float("-inf"))  # the tail block's ids past the end
    return ids.gather(1, vals.topk(k, dim=-1).indices)


class LazyLogits:
    """Logits of one pass's ``n`` nodes, computed by the LM head in blocks of rows on first
    use: the acceptance walk touches only the nodes on its path, so a draft rejected early
    does not pay the head (a quarter of a small model's compute) for the nodes after it.

    Each block's argmax is one device read. With ``topk`` (``k`` > 0) that read brings the
    block's top-``k`` ids too, so :meth:`topk` of those rows reads nothing more: on a GPU,
    whose pass is one block, a greedy pass then syncs once."""

    def __init__(
        self,
        runner: ModelRunner,
        last: torch.Tensor,
        block: int = 16,
        n: int | None = None,
        topk: int = 0,
    ) -> None:
        # last: [m, H], the nodes' n rows first (m > n: a static pass's padding rows, which
        # the head computes with them so that a block's shape never depends on the pass)
        self._runner, self._last, self._block = runner, last, block
        self._n = last.shape[0] if n is None else n
        self._k = topk
        self._blocks: dict[int, torch.Tensor] = {}  # block index -> logits [<=block, vocab]
        self._floats: dict[int, torch.Tensor] = {}  # the same in float32 (argmax, top-K)
        self._argmax: dict[int, list[int]] = {}
        self._topk: dict[int, list[list[int]]] = {}  # block index -> top-k ids per row

    def __len__(self) -> int:
        return self._n

    def _get(self, b: int) -> torch.Tensor:
        if b not in self._blocks:
            with torch.inference_mode():
                rows = self._last[b * self._block : (b + 1) * self._block]
                self._blocks[b] = self._runner.logits(rows)
        return self._blocks[b]

    def row(self, i: int) -> torch.Tensor:
        """Logits ``[vocab]`` of node ``i``."""
        return self._get(i // self._block)[i % self._block]

    def _float(self, b: int) -> torch.Tensor:
        if b not in self._floats:
            self._floats[b] = self._get(b).float()
        return self._floats[b]

    def argmax(self, i: int) -> int:
        b = i // self._block
        if b not in self._argmax:
            # float32 argmax is 5x faster than bfloat16's, same index (exact conversion;
            # ties go to the first maximum either way)
            best = self._float(b).argmax(-1)  # [rows]
            if self._k:  # one read for both: [rows, 1 + k]
                both = torch.cat([best[:, None], self._block_topk(b, self._k)], 1).tolist()
                self._argmax[b] = [row[0] for row in both]
                self._topk[b] = [row[1:] for row in both]
            else:
                self._argmax[b] = best.tolist()
        return self._argmax[b][i % self._block]

    def _block_topk(self, b: int, k: int) -> torch.Tensor:
        """Top-``k`` ids ``[rows, k]`` of block ``b`` (:func:`topk_ids`), in place: a path
        covers most of its blocks' rows; gathering its rows first would copy 0.6 MB a row."""
        with torch.inference_mode():
            return topk_ids(self._float(b), k)

    def rows(self, idx: list[int]) -> torch.Tensor:
        """Logits ``[len(idx), vocab]`` of the given nodes."""
        return torch.stack([self.row(i) for i in idx])

    def topk(self, idx: list[int], k: int) -> list[list[int]]:
        """Top-``k`` ids of the given nodes, best first, on the host: what the argmax read
        brought where ``k`` is the ``topk`` this was made with, else computed for whole
        blocks (one read)."""
        blocks = {i // self._block for i in idx}
        if k != self._k or not blocks <= self._topk.keys():
            ids = {b: self._block_topk(b, k) for b in blocks}
            found = torch.stack([ids[i // self._block][i % self._block] for i in idx])
            return found.tolist()
        return [self._topk[i // self._block][i % self._block] for i in idx]


@dataclass
class _Workspace:
    """A static-pass cache kept between generations on one model (see
    :meth:`ModelRunner._take_workspace`)."""

    cache: Any
    capacity: int
    static: StaticPasses | None = None
    busy: bool = False


# model -> (hooked layer index, pass shapes) -> its workspace (dropped with the model)
_WORKSPACES: weakref.WeakKeyDictionary[Any, dict[Any, _Workspace]] = weakref.WeakKeyDictionary()


def prepare_passes(model: Any) -> int:
    """Before a model's next generations: run (on a GPU: capture) a static pass for every key
    span that its free workspaces' caches can reach and no pass has used yet
    (:meth:`StaticPasses.prepare`); returns how many. For warm-ups (the bench's)."""
    count = 0
    with torch.inference_mode():
        for ws in _WORKSPACES.get(model, {}).values():
            if ws.static is not None and ws.static.valid and not ws.busy:
                count += ws.static.prepare()
    return count


@dataclass
class PassOutput:
    logits: LazyLogits  # per node, on demand
    hidden: torch.Tensor | None  # [n, H] hidden states of the hooked layer (None if unhooked)


def _decoder_layers(base: Any) -> Any:
    for name in ("layers", "h", "blocks", "decoder_layers"):
        layers = getattr(base, name, None)
        if layers is not None and hasattr(layers, "__len__") and len(layers) > 0:
            return layers
    decoder = getattr(base, "decoder", None)
    if decoder is not None and decoder is not base:
        return _decoder_layers(decoder)
    return None


class ModelRunner:
    """Runs a causal LM one step at a time against a cache it owns."""

    def __init__(
        self,
        model: Any,
        *,
        hidden_layer: int | None,
        want_hidden: bool,
        keep_final: bool = False,
        capacity: int = 1024,
        static: bool = False,
        shapes: tuple[int, ...] = BUCKETS,
        planes: bool = False,
        span: int = 0,
    ) -> None:

        config = model.config
        if getattr(config, "is_encoder_decoder", False):
            raise UnsupportedModelError(f"{type(model).__name__} is an encoder-decoder model")
        base = getattr(model, "base_model", None)
        lm_head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        if base is None or base is model or lm_head is None:
            raise UnsupportedModelError(
                f"{type(model).__name__} has no separate decoder and LM head"
            )
        params = inspect.signature(base.forward).parameters
        if "position_ids" not in params:
            raise UnsupportedModelError(f"{type(base).__name__} does not take position_ids")
        self._cache_kw = cache_keyword(base.forward)
        self.model, self.base, self.lm_head = model, base, lm_head
        first = next(model.parameters())
        self.device, self.dtype = first.device, first.dtype
        self.softcap = getattr(config, "final_logit_softcapping", None)
        self.vocab_size = getattr(lm_head, "out_features", None) or lm_head.weight.shape[0]
        self._captured: torch.Tensor | None = None
        self._keep_final = keep_final  # for topk_at (drafters that use top-K rows)
        self._final: torch.Tensor | None = None  # [capacity, H] final hidden state per position
        self._hook = None
        self._hidden_idx: int | None = None
        self.reused = 0  # prompt positions the last prefill took over from a PrefixCache
        if want_hidden:
            layers = _decoder_layers(base)
            if layers is None:
                raise UnsupportedModelError(
                    f"cannot find the decoder layers of {type(base).__name__}"
                )
            idx = len(layers) // 2 if hidden_layer is None else hidden_layer
            if not -len(layers) <= idx < len(layers):
                raise UnsupportedModelError(
                    f"hidden layer {idx} out of range (0..{len(layers) - 1})"
                )
            self._hook = layers[idx].register_forward_hook(self._capture)
        self._hidden_idx = idx if want_hidden else None
        self._static_wanted = static  # verify passes through StaticPasses (engine/graphs.py)
        self._shapes = shapes  # ... of these sizes
        self._planes = planes  # ... with key planes (graphs.planes_attention)
        self._span = span  # ... attending keys in spans of this many rows (graphs.key_span)
        self.static: StaticPasses | None = None  # made at the first pass (after the prefill)
        self._workspace: _Workspace | None = None
        self._counts0 = (0, 0)  # the static passes' (runs, replays) when this runner began
        if static:
            self._take_workspace(capacity)
        else:
            self.cache = self._new_cache(capacity)  # preallocated; grows by doubling past it

    def _new_cache(self, capacity: int) -> Any:
        from adapld_cli.engine.kvcache import new_cache

        try:
            return new_cache(self.model.config, capacity)
        except ValueError as exc:
            raise UnsupportedModelError(f"{type(self.model).__name__}: {exc}") from exc

    def _take_workspace(self, capacity: int) -> None:
        """Static passes keep their cache (and captured graphs) for the model's next
        generation: reuse a free workspace of this model, hooked layer and pass shapes of
        ``capacity`` rows rounded up to :data:`WORKSPACE_ROWS` (:data:`GPU_WORKSPACE_ROWS` on
        CUDA), else make one. The capacity is the keys' width in every pass, so it is a
        function of this generation alone: what ran before never changes the kernels' shapes
        (nor, where they are not batch-invariant, the output)."""
        spaces = _WORKSPACES.setdefault(self.model, {})
        key = (self._hidden_idx, self._shapes, self._planes, self._span)
        step = GPU_WORKSPACE_ROWS if self.device.type == "cuda" else WORKSPACE_ROWS
        rows = -(-capacity // step) * step
        ws = spaces.get(key)
        if ws is None or ws.busy or ws.capacity != rows:
            ws = _Workspace(self._new_cache(rows), rows)
            if key not in spaces or not spaces[key].busy:
                spaces[key] = ws
        else:
            for layer in ws.cache.layers:
                layer.reset()
        ws.busy = True
        self._workspace, self.cache, self.static = ws, ws.cache, ws.static
        if ws.static is not None:  # its passes run this runner's forward from now on
            ws.static.forward = self._static_forward
            self._counts0 = (ws.static.runs, ws.static.replays)

    @property
    def static_runs(self) -> int:
        """Passes this runner ran as static passes."""
        return 0 if self.static is None else self.static.runs - self._counts0[0]

    @property
    def graph_replays(self) -> int:
        """... of them replayed from a captured CUDA graph."""
        return 0 if self.static is None else self.static.replays - self._counts0[1]

    @property
    def first_passes(self) -> int:
        """Static passes so far that were the first of their shape and key span: on a GPU
        each captured its graph, tens of milliseconds that are no pass's cost (a count that
        only grows during a generation; compare it before and after a pass)."""
        return 0 if self.static is None else self.static.firsts

    @property
    def flat_rows(self) -> int:
        """The rows every pass computes when all run at one static shape (uniform passes:
        a pass over fewer nodes costs as much), else 0."""
        return self._shapes[0] if self._static_wanted and len(self._shapes) == 1 else 0

    def _capture(self, _module: Any, _inputs: Any, output: Any) -> None:
        self._captured = output[0] if isinstance(output, tuple) else output

    def close(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self._workspace is not None:  # free for the model's next generation
            self._workspace.busy = False
            self._workspace = None

    @property
    def cache_len(self) -> int:
        return self.cache.get_seq_length()

    def _run(self, ids: list[int], start: int, positions: list[int] | None, mask: Any) -> Any:
        input_ids = to_device([ids], self.device)
        if positions is None:
            pos = torch.arange(start, start + len(ids), device=self.device)[None]
        else:
            pos = to_device([positions], self.device)
        return self._forward(input_ids, pos, mask)

    def _forward(self, ids: torch.Tensor, pos: torch.Tensor, mask: Any) -> torch.Tensor:
        """The decoder over ``ids [1, n]`` at ``pos [1, n]`` with the cache: final hidden
        states ``[n, H]`` (the hook leaves the hooked layer's in ``_captured``)."""
        self._captured = None
        out = self.base(
            input_ids=ids,
            position_ids=pos,
            attention_mask=mask,
            use_cache=True,
            **{self._cache_kw: self.cache},
        )
        return out.last_hidden_state[0]

    def logits(self, last_hidden: torch.Tensor) -> torch.Tensor:
        """LM-head logits for final hidden states ``[n, H]`` -> ``[n, vocab]``."""
        logits = self.lm_head(last_hidden)
        if self.softcap:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits

    def _lazy(self, last: torch.Tensor, n: int | None = None, topk: int = 0) -> LazyLogits:
        """A pass's logits on demand (``last [m, H]``, its first ``n`` rows the nodes', default
        all; ``topk``: read each block's top-``topk`` ids with its argmax): in 16-row blocks
        on a CPU, where the LM head is a large share of a pass; all ``m`` rows at once on a
        GPU, where it is cheap and each block's argmax is a host-device sync (one per pass
        instead)."""
        block = 16 if self.device.type != "cuda" else max(1, len(last))
        return LazyLogits(self, last, block, n, topk)

    def _store_final(self, start: int, last: torch.Tensor) -> None:
        """Keep the final hidden states ``last [n, H]`` of positions ``start ..`` when the
        runner was asked to (``keep_final``; call in inference mode)."""
        if not self._keep_final:
            return
        end = start + last.shape[0]
        if self._final is None or self._final.shape[0] < end:
            size = (max(end, 2 * start, 1024), last.shape[1])
            grown = torch.empty(size, dtype=last.dtype, device=last.device)
            if self._final is not None:
                grown[:start] = self._final[:start]
            self._final = grown
        self._final[start:end] = last

    def topk_at(self, positions: list[int], k: int) -> torch.Tensor:
        """Top-``k`` next-token ids ``[len(positions), k]`` predicted at cached positions, from
        their kept final hidden states: one LM-head pass over those rows only."""
        assert self._final is not None and max(positions) < self.cache_len
        with torch.inference_mode():
            rows = self._final[to_device(positions, self._final.device)]
            return topk_ids(self.logits(rows), k)

    def verify(
        self,
        ids: list[int],
        parents: list[int] | None,
        depths: list[int] | None,
        topk: int = 0,
    ) -> PassOutput:
        """One verification pass over draft-tree nodes ``ids`` after the cache (``parents`` /
        ``depths`` None = a chain): a static pass (:mod:`adapld_cli.engine.graphs`; a CUDA
        graph on a GPU) when the runner was made with ``static`` and one of its shapes holds
        the pass (the cache grown first where it lacks the room), else :meth:`step` with the
        tree's mask. ``topk``: the logits read their rows' top-``topk`` ids with the argmax
        (:class:`LazyLogits`)."""
        n = len(ids)
        static = self._static_passes(n)
        if static is not None and static.fits(n):
            start = self.cache_len
            with torch.inference_mode():
                last, hidden = static.run(ids, parents, depths)  # [b, H]: the nodes' n first
                self._store_final(start, last[:n])
            return PassOutput(
                logits=self._lazy(last, n, topk), hidden=None if hidden is None else hidden[:n]
            )
        mask = (
            None if parents is None else tree_mask(parents, self.cache_len, self.dtype, self.device)
        )
        return self.step(ids, depths, mask, topk)

    def _static_passes(self, n: int) -> StaticPasses | None:
        """The static passes for a pass over ``n`` nodes (made at the first pass; remade
        when the cache has grown, here first when it lacks the room for this pass)."""
        if not self._static_wanted or not self.cache_len:
            return None
        need = None if self.static is None else self.static.rows_needed(n)
        if need is not None and need > self.static.capacity:
            for layer in self.cache.layers:
                layer.reserve(need)
        if self.static is None or not self.static.valid:  # first pass, or the cache grew
            old = self.static
            with torch.inference_mode():
                self.static = StaticPasses(
                    list(self.cache.layers),
                    self._static_forward,
                    self.device,
                    self.dtype,
                    capture=self.device.type == "cuda" and (old is None or old.capture),
                    shapes=self._shapes,
                    config=self.model.config,
                    planes=self._planes,
                    span=self._span,
                )
            if old is not None:  # counts go on
                self.static.runs, self.static.replays = old.runs, old.replays
                self.static.firsts = old.firsts
                self.static.fallback = old.fallback
            if self._workspace is not None:
                self._workspace.static = self.static
        return self.static

    def _static_forward(self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor) -> Any:
        last = self._forward(ids, pos, mask)
        hooked = None if self._captured is None else self._captured[0]
        return last, hooked  # [b, H], [b, H] or None

    def step(
        self, ids: list[int], depths: list[int] | None, mask: Any, topk: int = 0
    ) -> PassOutput:
        """Feed ``ids`` after the cache. ``depths`` (None = a chain) give positions
        ``cache_len + depth``; ``mask`` is a 4D additive mask or None for causal; ``topk``
        as for :meth:`verify`."""
        start = self.cache_len
        positions = None if depths is None else [start + d for d in depths]
        with torch.inference_mode():
            last = self._run(ids, start, positions, mask)
            self._store_final(start, last)
        hidden = None if self._captured is None else self._captured[0]
        return PassOutput(logits=self._lazy(last, topk=topk), hidden=hidden)

    def prefill(
        self,
        ids: list[int],
        top_k: int,
        chunk: int | None = None,
        prefix: PrefixCache | None = None,
    ) -> tuple[Any, Any]:
        """Feed ``ids`` into the (empty) cache in chunks of ``chunk`` tokens (default
        :data:`PREFILL_CHUNK`).

        Returns ``(hidden [n, H] or None, topk [n, top_k] or None)``: the hooked layer's
        states and each position's top-K next-token ids, computed per chunk of positions.
        With ``keep_final`` the final hidden states are kept too, for :meth:`topk_at`.
        ``prefix``: take over the whole chunks a previous prompt shares with ``ids`` and keep
        this one's for the next (:mod:`adapld_cli.engine.prefix`: the result is a fresh
        prefill's bit for bit); :attr:`reused` says how many positions were taken over.
        """
        chunk = chunk or PREFILL_CHUNK
        hiddens, topks = [], []
        key = (
            id(self.model),
            self._hidden_idx,
            str(self.dtype),
            str(self.device),
            top_k,
            self._keep_final,
            chunk,
        )
        taken, entry = prefix.lookup(key, ids, chunk) if prefix is not None else (0, None)
        self.reused = taken
        with torch.inference_mode():
            if entry is not None:
                self._adopt(entry, taken, hiddens, topks)
            for s in range(taken, len(ids), chunk):
                start = self.cache_len
                last = self._run(ids[s : s + chunk], start, None, None)
                self._store_final(start, last)
                if self._captured is not None:
                    hiddens.append(self._captured[0])
                if top_k:
                    for t in range(0, last.shape[0], 256):
                        topks.append(topk_ids(self.logits(last[t : t + 256]), top_k))
        hidden = torch.cat(hiddens) if hiddens else None
        topk = torch.cat(topks) if topks else None
        if prefix is not None:
            final = None if self._final is None else self._final[: len(ids)]
            prefix.keep(key, ids, chunk, self.cache.layers, hidden, final, topk)
        return hidden, topk

    def _adopt(self, entry: Any, n: int, hiddens: list[Any], topks: list[Any]) -> None:
        """Put the first ``n`` kept positions of a prefix-cache entry in place of a prefill
        of them (cache rows, final states; hidden and top-K rows appended to the lists)."""
        for layer, k, v in zip(self.cache.layers, entry.keys, entry.values, strict=True):
            layer.update(k[:, :, :n], v[:, :, :n])
        if entry.final is not None:
            self._store_final(0, entry.final[:n])
        if entry.hidden is not None:
            hiddens.append(entry.hidden[:n])
        if entry.topk is not None:
            topks.append(entry.topk[:n])

    def keep(self, prefix_len: int, idx: list[int], rows: torch.Tensor | None = None) -> None:
        """Compact the cache to ``prefix_len`` entries followed by the entries at
        ``prefix_len + i`` for ``i`` in ``idx`` (ascending): the accepted path. ``rows``: ``idx``
        on the device already, where the caller has it (no second copy)."""
        contiguous = idx == list(range(len(idx)))
        new_len = prefix_len + len(idx)
        if contiguous:
            drop = self.cache_len - new_len
            if drop > 0:  # guard: crop(0) is a no-op in 5.x but meant "keep 0" in 4.x
                self.cache.crop(-drop)
            return
        sel = (to_device(idx, self.device) if rows is None else rows) + prefix_len
        with torch.inference_mode():
            if self._final is not None:
                self._final[prefix_len:new_len] = self._final.index_select(0, sel)
            for layer in self.cache.layers:  # in place: the accepted rows only are copied
                layer.keep(prefix_len, sel)
