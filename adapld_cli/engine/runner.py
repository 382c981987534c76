"""The model runner: forward passes of a Hugging Face causal LM over new tokens against a KV
cache it owns, and what the drafters need from them (a middle layer's hidden states, top-K
next-token predictions).

:class:`ModelRunner` knows Hugging Face decoder-only models (Llama, Qwen2, GPT-2 and others
that take ``position_ids``, a 4D float attention mask and a ``DynamicCache``, here one whose
layers are written in place, :mod:`adapld_cli.engine.kvcache`); it knows nothing of
drafting. Hidden states are captured by a forward hook on one decoder layer, never by asking
the model for every layer's states. Prefill computes top-K in chunks: full prompt x vocab
logits are never materialised. Verify passes run eagerly or as static passes
(:mod:`adapld_cli.engine.graphs`) over a workspace's cache
(:mod:`adapld_cli.engine.workspaces`).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch

from adapld_cli.compat import cache_keyword
from adapld_cli.engine.graphs import BUCKETS, StaticPasses
from adapld_cli.engine.logits import LazyLogits, topk_ids
from adapld_cli.engine.prefix import PrefixCache
from adapld_cli.engine.transfer import to_device
from adapld_cli.engine.tree import tree_mask
from adapld_cli.engine.types import UnsupportedModelError
from adapld_cli.engine.workspaces import Workspace, Workspaces, workspace_rows

# Prompt tokens per prefill pass (docs/design.md, "Prefill chunks"), or fewer on a model whose
# passes are batch-invariant only up to ``model.adapld_exact_rows`` rows (the CPU's exact
# kernels): there a chunk is such a pass, so the prompt's cache rows are bit for bit those
# token-by-token decoding would write. Every decoding method shares the prefill, so the chunk
# never affects exactness.
PREFILL_CHUNK = 256


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
    """Runs a causal LM one step at a time against a cache it owns (with ``static``: a
    workspace's cache from ``workspaces``, held until :meth:`close`; none given: a
    :class:`~adapld_cli.engine.workspaces.Workspaces` of its own)."""

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
        workspaces: Workspaces | None = None,
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
        self._hooked: torch.Tensor | None = None  # [capacity, H] hooked layer's, for remember
        self._hook = None
        self._hidden_idx: int | None = None
        self.reused = 0  # prompt positions the last prefill took over from a PrefixCache
        self._prefix_key: tuple[Any, ...] | None = None  # the last prefill's PrefixCache key
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
        self._workspace: Workspace | None = None
        self._counts0 = (0, 0)  # the static passes' (runs, replays) when this runner began
        if static:
            self._take_workspace(capacity, Workspaces() if workspaces is None else workspaces)
        else:
            self.cache = self._new_cache(capacity)  # preallocated; grows by doubling past it

    def _new_cache(self, capacity: int) -> Any:
        from adapld_cli.engine.kvcache import new_cache

        try:
            return new_cache(self.model.config, capacity)
        except ValueError as exc:
            raise UnsupportedModelError(f"{type(self.model).__name__}: {exc}") from exc

    def _take_workspace(self, capacity: int, workspaces: Workspaces) -> None:
        """Static passes keep their cache (and captured graphs) for the model's next
        generation: take over the workspace of this model and pass layout (hooked layer,
        shapes, planes, span) of ``capacity`` rows rounded up (:func:`workspace_rows`), or a
        new one (:meth:`Workspaces.take`)."""
        key = (self._hidden_idx, self._shapes, self._planes, self._span)
        rows = workspace_rows(capacity, self.device.type)
        ws = workspaces.take(self.model, key, rows, self._new_cache)
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
        runner was asked to (``keep_final``; call in inference mode); with :meth:`exact_rows`
        and a hooked layer, that layer's states of the same positions too (for
        :meth:`remember`)."""
        if self._keep_final:
            self._final = _put(self._final, start, last)
        if self._hidden_idx is not None and self._captured is not None and self.exact_rows():
            self._hooked = _put(self._hooked, start, self._captured[0])

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
        :meth:`prefill_chunk`).

        Returns ``(hidden [n, H] or None, topk [n, top_k] or None)``: the hooked layer's
        states and each position's top-K next-token ids, computed per chunk of positions.
        With ``keep_final`` the final hidden states are kept too, for :meth:`topk_at`.
        ``prefix``: take over what a previous prompt shares with ``ids`` (whole chunks, or
        any prefix where every row is a single step's: :meth:`exact_rows`) and keep this
        one's for the next (:mod:`adapld_cli.engine.prefix`: the result is a fresh prefill's
        bit for bit); :attr:`reused` says how many positions were taken over.
        """
        chunk = chunk or self.prefill_chunk()
        unit = 1 if self.exact_rows() else chunk  # positions taken over come in whole units
        hiddens, topks = [], []
        key = (
            id(self.model),
            self._hidden_idx,
            str(self.dtype),
            str(self.device),
            top_k,
            self._keep_final,
            chunk,
            unit,
        )
        self._prefix_key = key
        taken, entry = prefix.lookup(key, ids, unit) if prefix is not None else (0, None)
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
            prefix.keep(key, ids, unit, self.cache.layers, hidden, final, topk)
        return hidden, topk

    def exact_rows(self) -> bool:
        """Whether every row this runner writes is bit for bit what a single decoding step
        writes: eager passes on the exact kernels (prefill chunks and verify passes alike)."""
        exact = getattr(self.model, "adapld_exact_rows", None)
        return bool(exact) and not self._static_wanted

    def remember(self, prefix: PrefixCache, ids: list[int]) -> None:
        """Keep the rows of ``ids`` (the prompt and the tokens decoded after it; the cache
        holds the rows of the first ``cache_len`` of them) for the next prefill that shares
        them, where they are a prefill's bit for bit (:meth:`exact_rows`) and carry no top-K
        rows (a decoded position has none)."""
        key = self._prefix_key
        if key is None or not self.exact_rows() or key[4]:  # key[4]: the prefill's top_k
            return
        n = min(len(ids), self.cache_len)
        final = None if self._final is None else self._final[:n]
        hooked = None if self._hidden_idx is None else self._hooked
        if self._hidden_idx is not None and (hooked is None or hooked.shape[0] < n):
            return
        prefix.keep(
            key, ids[:n], 1, self.cache.layers, None if hooked is None else hooked[:n], final, None
        )

    def prefill_chunk(self) -> int:
        """The default prefill chunk: :data:`PREFILL_CHUNK`, or the model's widest exact pass
        (``adapld_exact_rows``) where that is smaller."""
        exact = getattr(self.model, "adapld_exact_rows", None)
        return min(PREFILL_CHUNK, exact) if exact else PREFILL_CHUNK

    def _adopt(self, entry: Any, n: int, hiddens: list[Any], topks: list[Any]) -> None:
        """Put the first ``n`` kept positions of a prefix-cache entry in place of a prefill
        of them (cache rows, final states; hidden and top-K rows appended to the lists)."""
        for layer, k, v in zip(self.cache.layers, entry.keys, entry.values, strict=True):
            layer.update(k[:, :, :n], v[:, :, :n])
        if entry.final is not None and self._keep_final:
            self._final = _put(self._final, 0, entry.final[:n])
        if entry.hidden is not None:
            hiddens.append(entry.hidden[:n])
            if self.exact_rows():
                self._hooked = _put(self._hooked, 0, entry.hidden[:n])
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
            for kept in (self._final, self._hooked):
                if kept is not None:
                    kept[prefix_len:new_len] = kept.index_select(0, sel)
            for layer in self.cache.layers:  # in place: the accepted rows only are copied
                layer.keep(prefix_len, sel)


def _put(buf: torch.Tensor | None, start: int, rows: torch.Tensor) -> torch.Tensor:
    """``buf`` (per position, grown by doubling as needed) with ``rows [n, H]`` written at
    positions ``start ..``."""
    end = start + rows.shape[0]
    if buf is None or buf.shape[0] < end:
        grown = torch.empty(
            (max(end, 2 * start, 1024), rows.shape[1]), dtype=rows.dtype, device=rows.device
        )
        if buf is not None:
            grown[:start] = buf[:start]
        buf = grown
    buf[start:end] = rows
    return buf
