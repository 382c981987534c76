"""Reuse of previous prompts' prefill: the rows of a common prefix.

Contract: a :class:`PrefixCache` remembers, for the prompts prefilled through it, the KV rows,
hooked-layer hidden states, final hidden states and top-K rows of their positions in whole
*units* of the caller's choosing (positions ``0 .. k * unit``). The next prefill through the
same cache on the same model and settings takes over the longest run of units its prompt
shares token for token with what is kept, and runs the rest as a fresh prefill would.

- ``unit`` = the prefill chunk (any kernel, any device): the rest starts at the first chunk
  boundary not shared, in the same chunks, so every chunk is computed from the same tokens,
  with the same shape and the same cached keys as without the cache: bit for bit a fresh
  prefill's, no batch invariance needed. A prompt that shares less than one chunk reuses
  nothing.
- ``unit`` = 1, where every row of a pass is bit for bit a single decoding step's (the CPU's
  exact kernels, whose prefill chunks are such passes: ``ModelRunner.prefill_chunk``): any
  shared prefix is taken, and a generation's own decoded rows may be kept too
  (``ModelRunner.remember``), since each is the row a prefill of those tokens would write. A
  repair prompt that repeats the rejected answer, or a chat that goes on after an answer,
  then prefills only what is new.

The kept prompts form a tree (a radix tree over tokens, as SGLang's RadixAttention keeps
them): the rows of a prefix several prompts share are kept once, and each prompt adds only
the positions past it. Clients interleave conversations that share a long beginning: aider
sends its system prompt, the repository map and the file, then the request; a reflection, a
lint fix or a commit message follow with the same beginning or another, and the user's next
edit shares the first beginning again. Kept once, those beginnings stay while the branches
come and go. ``max_tokens`` bounds the positions kept, all branches together; past it the
least recently used branch ends (leaves) go first. Each node holds whole units of one
prompt's prefill, cut only at unit boundaries, so a path's rows are what a prefill of its
tokens writes, chunk for chunk.

Used where one process serves many generations (``adapld serve``, a multi-file ``adapld
edit``). One generation at a time uses a cache (it is not thread-safe).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(eq=False)  # nodes are told apart by identity (comparing tensors is ambiguous)
class _Node:
    """Positions ``start .. start + len(ids)`` of the prompts through it, and their rows."""

    ids: list[int]
    start: int
    keys: list[torch.Tensor]  # per layer [B, KV, len(ids), d]
    values: list[torch.Tensor]
    hidden: torch.Tensor | None  # [len(ids), H] hooked layer
    final: torch.Tensor | None  # [len(ids), H] final hidden states
    topk: torch.Tensor | None  # [len(ids), k]
    parent: _Node | None = None
    children: list[_Node] = field(default_factory=list)
    used: int = 0  # the cache's clock when a prompt last went through it

    def split(self, k: int) -> None:
        """Cut this node after its first ``k`` positions: the rest becomes its only child
        (copies, so evicting either part frees its memory)."""
        rows = (self.keys, self.values, self.hidden, self.final, self.topk)
        tail = _Node(
            self.ids[k:], self.start + k, *_span(*rows, k, len(self.ids)),
            parent=self, children=self.children, used=self.used,
        )  # fmt: skip
        for child in tail.children:
            child.parent = tail
        self.ids = self.ids[:k]
        self.keys, self.values, self.hidden, self.final, self.topk = _span(*rows, 0, k)
        self.children = [tail]


def _span(
    keys: list[torch.Tensor],
    values: list[torch.Tensor],
    hidden: torch.Tensor | None,
    final: torch.Tensor | None,
    topk: torch.Tensor | None,
    a: int,
    b: int,
) -> tuple[Any, ...]:
    """Copies of positions ``a .. b`` of rows laid out as a node's (KV on dim 2, the rest
    on dim 0): ``(keys, values, hidden, final, topk)``."""

    def rows(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t[a:b].clone()

    return (
        [k[:, :, a:b].clone() for k in keys],
        [v[:, :, a:b].clone() for v in values],
        rows(hidden),
        rows(final),
        rows(topk),
    )


@dataclass(frozen=True)
class Rows:
    """The rows of a prompt's first ``len(ids)`` positions, as :meth:`PrefixCache.lookup`
    returns them (fields as the node's, over all those positions)."""

    ids: list[int]
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    hidden: torch.Tensor | None
    final: torch.Tensor | None
    topk: torch.Tensor | None


class PrefixCache:
    """The kept prompts' prefill rows, as a tree of shared prefixes (module docstring)."""

    def __init__(self, max_tokens: int = 16384) -> None:
        self.max_tokens = max_tokens
        self._roots: dict[tuple[Any, ...], _Node] = {}  # one empty root per key
        self._clock = itertools.count(1)

    @property
    def positions(self) -> int:
        """Positions kept, every node counted once."""
        return sum(len(node.ids) for root in self._roots.values() for node in _walk(root))

    def kept(self) -> list[tuple[tuple[Any, ...], list[int]]]:
        """``(key, tokens)`` of every branch end (a prompt as kept), most recent first."""
        ends = [
            (node.used, key, _path_ids(node))
            for key, root in self._roots.items()
            for node in _walk(root)
            if node is not root and not node.children
        ]
        return [(key, ids) for _, key, ids in sorted(ends, key=lambda e: -e[0])]

    def lookup(self, key: tuple[Any, ...], ids: list[int], unit: int) -> tuple[int, Rows | None]:
        """``(n, rows)``: how many leading positions of ``ids`` can be taken over (whole units
        only) and their rows, or ``(0, None)``."""
        root = self._roots.get(key)
        if root is None:
            return 0, None
        path, matched = _match(root, ids)
        n = matched // unit * unit
        if n == 0:
            return 0, None
        path = [node for node in path if node.start < n]
        self._touch(path)
        return n, _rows(path, n)

    def keep(
        self,
        key: tuple[Any, ...],
        ids: list[int],
        unit: int,
        layers: list[Any],
        hidden: torch.Tensor | None,
        final: torch.Tensor | None,
        topk: torch.Tensor | None,
    ) -> None:
        """Remember the rows of ``ids``' whole units (``layers[i].keys [B, KV, >= n, d]`` and
        the ``[>= n, ...]`` row tensors hold positions from 0): the positions past what is
        kept already are copied into a new branch (the generation goes on writing its own
        buffers); then the least recently used branch ends go while the positions kept
        exceed ``max_tokens``."""
        n = min(len(ids), self.max_tokens) // unit * unit
        if n == 0:
            return
        root = self._roots.setdefault(key, _Node([], 0, [], [], None, None, None))
        path, matched = _match(root, ids[:n])
        shared = matched // unit * unit  # new rows start at a unit boundary (module docstring)
        while path and path[-1].start >= shared:  # nodes only their own prompts share
            path.pop()
        node = path[-1] if path else root
        if node.start + len(node.ids) > shared:  # ends past the shared positions: cut there
            node.split(shared - node.start)
        if shared < n:
            keys = [layer.keys for layer in layers]
            values = [layer.values for layer in layers]
            rows = _span(keys, values, hidden, final, topk, shared, n)
            node = _Node(list(ids[shared:n]), shared, *rows, parent=node)
            node.parent.children.append(node)  # type: ignore[union-attr]
            path = [*path, node]
        self._touch(path)
        self._evict()

    def _touch(self, path: list[_Node]) -> None:
        now = next(self._clock)
        for node in path:
            node.used = now

    def _evict(self) -> None:
        total = self.positions
        while total > self.max_tokens:
            ends = [
                node
                for root in self._roots.values()
                for node in _walk(root)
                if node.parent is not None and not node.children
            ]
            oldest = min(ends, key=lambda node: node.used)
            oldest.parent.children.remove(oldest)  # type: ignore[union-attr]
            total -= len(oldest.ids)


def _walk(node: _Node) -> list[_Node]:
    """``node`` and every node below it."""
    out, todo = [], [node]
    while todo:
        cur = todo.pop()
        out.append(cur)
        todo.extend(cur.children)
    return out


def _match(root: _Node, ids: list[int]) -> tuple[list[_Node], int]:
    """The nodes below ``root`` that ``ids`` runs through (the last one perhaps only in part,
    the child sharing most taken at each branching) and how many positions they share."""
    path: list[_Node] = []
    node, pos = root, 0
    while True:
        best, best_n = None, 0
        for child in node.children:
            n = _shared(child.ids, ids[pos:])
            if n > best_n:
                best, best_n = child, n
        if best is None:
            return path, pos
        path.append(best)
        pos += best_n
        if best_n < len(best.ids):
            return path, pos
        node = best


def _rows(path: list[_Node], n: int) -> Rows:
    """The first ``n`` positions' rows along ``path`` (each node's start is below ``n``)."""
    sizes = [min(len(node.ids), n - node.start) for node in path]

    def cat(parts: list[torch.Tensor | None], dim: int) -> torch.Tensor | None:
        if any(p is None for p in parts):
            return None
        pieces = [p.narrow(dim, 0, k) for p, k in zip(parts, sizes, strict=True)]  # type: ignore[union-attr]
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=dim)  # one: a view

    layers = range(len(path[0].keys))
    return Rows(
        ids=[t for node in path for t in node.ids][:n],
        keys=[cat([node.keys[i] for node in path], 2) for i in layers],  # type: ignore[misc]
        values=[cat([node.values[i] for node in path], 2) for i in layers],  # type: ignore[misc]
        hidden=cat([node.hidden for node in path], 0),
        final=cat([node.final for node in path], 0),
        topk=cat([node.topk for node in path], 0),
    )


def _path_ids(node: _Node) -> list[int]:
    parts = []
    cur: _Node | None = node
    while cur is not None:
        parts.append(cur.ids)
        cur = cur.parent
    return [t for part in reversed(parts) for t in part]


def _shared(a: list[int], b: list[int]) -> int:
    """The length of the common prefix of ``a`` and ``b``."""
    n, limit = 0, min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return n
