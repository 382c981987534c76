"""Reuse of a previous prompt's prefill: whole prefill chunks of a common prefix.

Contract: a :class:`PrefixCache` remembers, for the last prompt prefilled through it, the KV
rows, hooked-layer hidden states, final hidden states and top-K rows of its *complete*
prefill chunks (positions ``0 .. k * chunk``). The next prefill through the same cache on the
same model and settings takes over the chunks its prompt shares token for token, and runs the
rest as a fresh prefill would: from the first chunk boundary not shared, in the same chunks.
Every chunk is therefore computed from the same tokens, with the same shape and the same
cached keys as without the cache, so the result is bit for bit a fresh prefill's on any
kernel and device (no batch invariance needed). A prompt that shares less than one chunk
reuses nothing.

Used where one process serves many generations (``adapld serve``, a multi-file ``adapld
edit``): a second edit of the same file skips most of its prefill. One generation at a time
uses a cache (it is not thread-safe); ``max_tokens`` bounds what it keeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class _Entry:
    key: tuple[Any, ...]  # what the rows depend on besides the tokens
    ids: list[int]  # the tokens of the kept chunks
    keys: list[torch.Tensor]  # per layer [B, KV, n, d]
    values: list[torch.Tensor]
    hidden: torch.Tensor | None  # [n, H] hooked layer
    final: torch.Tensor | None  # [n, H] final hidden states
    topk: torch.Tensor | None  # [n, k]


class PrefixCache:
    """The last prompt's complete prefill chunks (module docstring)."""

    def __init__(self, max_tokens: int = 8192) -> None:
        self.max_tokens = max_tokens
        self._entry: _Entry | None = None

    def lookup(self, key: tuple[Any, ...], ids: list[int], chunk: int) -> tuple[int, _Entry | None]:
        """``(n, entry)``: how many leading positions of ``ids`` can be taken over (whole
        chunks only; callers slice ``entry``'s rows to ``n``), or ``(0, None)``."""
        e = self._entry
        if e is None or e.key != key:
            return 0, None
        n = 0
        limit = min(len(e.ids), len(ids))
        while n < limit and e.ids[n] == ids[n]:
            n += 1
        n = n // chunk * chunk
        return n, (e if n else None)

    def keep(
        self,
        key: tuple[Any, ...],
        ids: list[int],
        chunk: int,
        layers: list[Any],
        hidden: torch.Tensor | None,
        final: torch.Tensor | None,
        topk: torch.Tensor | None,
    ) -> None:
        """Remember the complete chunks of a prefill of ``ids`` (copies: the generation goes
        on writing its own buffers)."""
        n = min(len(ids), self.max_tokens) // chunk * chunk
        if n == 0:
            self._entry = None
            return

        def rows(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t[:n].clone()

        self._entry = _Entry(
            key=key,
            ids=list(ids[:n]),
            keys=[layer.keys[:, :, :n].clone() for layer in layers],
            values=[layer.values[:, :, :n].clone() for layer in layers],
            hidden=rows(hidden),
            final=rows(final),
            topk=rows(topk),
        )
