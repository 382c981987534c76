"""Incremental n-gram index over a growing token list.

``NgramIndex(min_n, max_n)`` maps every n-gram of the context (for each ``n`` in the range)
to the positions where it *ends*. Tokens are appended with :meth:`extend`; nothing is ever
rescanned. :meth:`query` returns earlier occurrences of the context's last ``n`` tokens.
"""

from __future__ import annotations

from collections.abc import Sequence


class NgramIndex:
    """End positions of every n-gram (``min_n <= n <= max_n``) of an append-only token list."""

    def __init__(self, min_n: int, max_n: int) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError("need 1 <= min_n <= max_n")
        self.min_n, self.max_n = min_n, max_n
        self.tokens: list[int] = []
        self._pos: dict[int, dict[tuple[int, ...], list[int]]] = {
            n: {} for n in range(min_n, max_n + 1)
        }

    def __len__(self) -> int:
        return len(self.tokens)

    def extend(self, tokens: Sequence[int]) -> None:
        """Append tokens and index the n-grams that end at them."""
        toks = self.tokens
        for t in tokens:
            toks.append(int(t))
            end = len(toks)
            for n, table in self._pos.items():
                if end >= n:
                    table.setdefault(tuple(toks[end - n : end]), []).append(end - 1)

    def lookup(self, key: Sequence[int], before: int) -> list[int]:
        """End positions ``< before`` of occurrences of ``key``, oldest first."""
        hits = self._pos[len(key)].get(tuple(key))
        if not hits:
            return []
        i = len(hits)
        while i and hits[i - 1] >= before:  # positions are increasing: trim the tail
            i -= 1
        return hits if i == len(hits) else hits[:i]

    def query(self, n: int) -> list[int]:
        """Earlier end positions of the last ``n`` tokens (the last position itself excluded)."""
        toks = self.tokens
        if len(toks) < n:
            return []
        return self.lookup(toks[-n:], len(toks) - 1)

    def longest_match(self) -> tuple[int, list[int]]:
        """``(n, positions)`` for the longest ``n`` whose query finds earlier occurrences;
        ``(0, [])`` when none does."""
        for n in range(self.max_n, self.min_n - 1, -1):
            hits = self.query(n)
            if hits:
                return n, hits
        return 0, []
