"""Reuse of a previous prompt's prefill: the rows of a common prefix.

Contract: a :class:`PrefixCache` remembers, for the last few prompts prefilled through it, the
KV rows, hooked-layer hidden states, final hidden states and top-K rows of their positions in
whole *units* of the caller's choosing (positions ``0 .. k * unit``). The next prefill through
the same cache on the same model and settings takes over the units its prompt shares token for
token with the remembered prompt that shares the most, and runs the rest as a fresh prefill
would.

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

Used where one process serves many generations (``adapld serve``, a multi-file ``adapld
edit``): a second edit of the same file skips most of its prefill. One generation at a time
uses a cache (it is not thread-safe); ``max_tokens`` bounds the positions it keeps, all
prompts together (the least recently used go first). Several prompts, not one, because
clients interleave conversations: aider sends its edit, then a reflection or a commit-message
request with another beginning, and the next edit shares its prefix with the first only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(eq=False)  # entries are told apart by identity (comparing tensors is ambiguous)
class _Entry:
    key: tuple[Any, ...]  # what the rows depend on besides the tokens
    ids: list[int]  # the tokens of the kept chunks
    keys: list[torch.Tensor]  # per layer [B, KV, n, d]
    values: list[torch.Tensor]
    hidden: torch.Tensor | None  # [n, H] hooked layer
    final: torch.Tensor | None  # [n, H] final hidden states
    topk: torch.Tensor | None  # [n, k]


class PrefixCache:
    """The complete prefill chunks of the last prompts (module docstring)."""

    def __init__(self, max_tokens: int = 16384) -> None:
        self.max_tokens = max_tokens
        self._entries: list[_Entry] = []  # most recently used first

    def lookup(self, key: tuple[Any, ...], ids: list[int], unit: int) -> tuple[int, _Entry | None]:
        """``(n, entry)``: how many leading positions of ``ids`` can be taken over (whole
        units only; callers slice ``entry``'s rows to ``n``), from the kept prompt sharing
        the most, or ``(0, None)``."""
        best, found = 0, None
        for e in self._entries:
            if e.key != key:
                continue
            n = _shared(e.ids, ids) // unit * unit
            if n > best:
                best, found = n, e
        if found is not None:
            self._to_front(found)
        return best, found

    def _to_front(self, entry: _Entry) -> None:
        self._entries.remove(entry)
        self._entries.insert(0, entry)

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
        """Remember the rows of ``ids``' whole units (copies: the generation goes on writing
        its own buffers). A prompt kept already is not copied again; a kept
        prompt that this one extends is dropped (this one serves everything it did); then the
        least recently used go while the positions kept exceed ``max_tokens``."""
        n = min(len(ids), self.max_tokens) // unit * unit
        if n == 0:
            return
        same = [e for e in self._entries if e.key == key and e.ids == ids[:n]]
        if same:  # the same tokens under the same key: the same rows (module docstring)
            self._to_front(same[0])
            return

        def rows(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t[:n].clone()

        self._entries = [
            e for e in self._entries if not (e.key == key and _shared(e.ids, ids) == len(e.ids))
        ]
        self._entries.insert(
            0,
            _Entry(
                key=key,
                ids=list(ids[:n]),
                keys=[layer.keys[:, :, :n].clone() for layer in layers],
                values=[layer.values[:, :, :n].clone() for layer in layers],
                hidden=rows(hidden),
                final=rows(final),
                topk=rows(topk),
            ),
        )
        while sum(len(e.ids) for e in self._entries) > self.max_tokens:
            self._entries.pop()


def _shared(a: list[int], b: list[int]) -> int:
    """The length of the common prefix of ``a`` and ``b``."""
    n, limit = 0, min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return n
