"""A verification pass's logits, read lazily: the LM head in blocks of rows, each block's
argmax (and, where asked, its top-K ids) read from the device at once.

:func:`topk_ids` is the engine's top-K of logit rows (blockwise on a CPU, torch's own
elsewhere); :class:`LazyLogits` holds one pass's final hidden states and computes logits
only for the blocks the acceptance walk reaches.
"""

from __future__ import annotations

from typing import Protocol

import torch

# Vocabulary entries per block of :func:`topk_ids`' first pass (a row's maximum per block).
TOPK_BLOCK = 128


class Head(Protocol):
    def logits(self, last_hidden: torch.Tensor) -> torch.Tensor:
        """LM-head logits ``[n, vocab]`` of final hidden states ``[n, H]``."""
        ...


def topk_ids(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Ids ``[n, k]`` of the ``k`` largest of each row of ``logits [n, V]``, largest first
    (the values of ``logits.topk(k).indices``; among equal values either may come first).

    On a CPU, torch's ``topk`` over a whole vocabulary is slow enough to be most of the
    engine's own work per pass (docs/design.md, "1. The engine", ``topk[j]``). Here in
    float32: each row's maximum per block of :data:`TOPK_BLOCK` entries, the ``k`` best
    blocks (every one of the ``k`` largest entries lies in one of them), then the ``k`` best
    of those blocks' entries. Elsewhere (CUDA): torch's own."""
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
    """Logits of one pass's ``n`` nodes, computed by ``head`` in blocks of rows on first
    use: the acceptance walk touches only the nodes on its path, so a draft rejected early
    does not pay the LM head (a large share of a small model's compute) for the nodes after
    it.

    Each block's argmax is one device read. With ``topk`` (``k`` > 0) that read brings the
    block's top-``k`` ids too, so :meth:`topk` of those rows reads nothing more: on a GPU,
    whose pass is one block, a greedy pass then syncs once."""

    def __init__(
        self,
        head: Head,
        last: torch.Tensor,
        block: int = 16,
        n: int | None = None,
        topk: int = 0,
    ) -> None:
        # last: [m, H], the nodes' n rows first (m > n: a static pass's padding rows, which
        # the head computes with them so that a block's shape never depends on the pass)
        self._head, self._last, self._block = head, last, block
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
                self._blocks[b] = self._head.logits(rows)
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
            # in float32: faster than a bfloat16 argmax and the same index (the conversion
            # is exact; ties go to the first maximum either way; docs/design.md, "Reading a
            # pass's logits")
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
        covers most of its blocks' rows, and gathering its rows first would copy a whole
        vocabulary row per node."""
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
