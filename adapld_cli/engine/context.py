"""The reusable context ``R`` and what earlier forward passes left about it.

``Context`` holds the tokens (prompt + generated; the last one is *pending*: emitted but not
yet fed to the model), and per fed position ``j`` the hidden state ``h[j]`` of the hooked
layer (on the model's device; L2-normalised by :meth:`unit_hidden` when a drafter reads it)
and the model's top-K next-token ids ``topk[j]`` (on the host: a list per position, which
drafters read every step without a device read). Everything is recorded from passes the
engine ran anyway; drafters only read it.

Prompt positions get no top-K at prefill on a CPU (an LM-head pass over the whole prompt is
a large share of the prefill there; docs/design.md, "1. The engine"): their row holds the
token that followed them. With a predictor
attached (:meth:`attach`, the model runner), :meth:`topk_rows` computes a position's real
top-K on demand from its cached final hidden state (one LM-head row), caches it, and times
it so drafters can weigh a lookup against what it may gain (:meth:`lookup_ratio`).
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import torch

from adapld_cli.engine.cost import CostModel

# cost of one on-demand top-K lookup in single decode steps, before one was timed: on a CPU
# the LM head is about a quarter of a small model's weights; on a GPU a row is nearly free
LOOKUP_PRIOR = {"cpu": 0.25, "cuda": 0.02}


class Predictor(Protocol):
    def topk_at(self, positions: list[int], k: int) -> torch.Tensor:
        """Top-``k`` next-token ids ``[len(positions), k]`` at cached positions."""
        ...


class Context:
    """Tokens of ``R`` plus cached hidden states ``[capacity, H]`` and top-K ``[capacity, K]``."""

    def __init__(
        self,
        prompt: list[int],
        capacity: int,
        hidden_size: int,
        top_k: int,
        device: Any,
        cost: CostModel,
    ) -> None:
        self.tokens: list[int] = list(prompt)
        self.prompt_len = len(prompt)
        self.cost = cost
        self.device_type = torch.device(device).type
        self.hidden: torch.Tensor | None = (
            torch.zeros(capacity, hidden_size, dtype=torch.float32, device=device)
            if hidden_size
            else None
        )
        self.top_k = top_k
        # per position, its top-K ids, best first (fewer where observed: see observed_topk)
        self.topk: list[list[int]] | None = [[] for _ in range(capacity)] if top_k else None
        self.known = bytearray(capacity if top_k else 0)  # 1: topk[j] is the model's top-K
        self._unit = 0  # hidden[:_unit] is L2-normalised (rows past it as recorded)
        self.predictor: Predictor | None = None
        self.lookups = 0  # on-demand lookups run (each one LM-head pass over a few rows)
        self.lookup_s = 0.0  # decaying mean seconds of one lookup (0 = none timed yet)

    def attach(self, predictor: Predictor) -> None:
        """Compute missing top-K rows on demand with ``predictor`` (see :meth:`topk_rows`)."""
        self.predictor = predictor

    @property
    def pending(self) -> int:
        """Index of the pending token (the last one of ``R``)."""
        return len(self.tokens) - 1

    @property
    def generated(self) -> list[int]:
        return self.tokens[self.prompt_len :]

    def observed_topk(self, end: int, start: int = 0) -> None:
        """For positions ``start .. end - 1`` without computed predictions: the token that
        followed each one stands as its only top-K entry."""
        if self.topk is None or end <= start:
            return
        self.topk[start:end] = [[t] for t in self.tokens[start + 1 : end + 1]]
        self.known[start:end] = bytes(end - start)

    def record(
        self,
        start: int,
        hidden: torch.Tensor | None,
        topk: torch.Tensor | list[list[int]] | None,
    ) -> None:
        """Store rows for positions ``start ..`` (``hidden [m, H]``, copied as it is: see
        :meth:`unit_hidden`; ``topk [m, K]``, a tensor read once here or rows already on the
        host)."""
        if hidden is not None and self.hidden is not None:
            self.hidden[start : start + hidden.shape[0]] = hidden
            self._unit = min(self._unit, start)
        if topk is not None and self.topk is not None:
            rows = topk.tolist() if isinstance(topk, torch.Tensor) else topk
            m = len(rows)
            self.topk[start : start + m] = rows
            self.known[start : start + m] = b"\x01" * m

    def unit_hidden(self, end: int) -> torch.Tensor:
        """The L2-normalised hidden states ``[end, H]`` of positions ``0 .. end - 1``: rows
        recorded since the last call are normalised here, in place and all at once: once
        per pass at record time a small op runs right after a forward pass, on a CPU with
        its caches cold, while drafters read states only on some steps (docs/design.md,
        "1. The engine", ``h[j]``)."""
        assert self.hidden is not None
        if end > self._unit:
            rows = self.hidden[self._unit : end]
            torch.nn.functional.normalize(rows, dim=-1, out=rows)
            self._unit = end
        return self.hidden[:end]

    def lookup_ratio(self) -> float:
        """Cost of one on-demand top-K lookup in single decode steps (measured, else prior)."""
        step = self.cost.step_s
        if self.lookup_s > 0 and step > 0:
            return self.lookup_s / step
        return LOOKUP_PRIOR.get(self.device_type, LOOKUP_PRIOR["cpu"])

    def can_lookup(self, positions: list[int]) -> bool:
        """Whether :meth:`topk_rows` would compute anything for ``positions``."""
        return self.predictor is not None and any(not self.known[j] for j in positions)

    def topk_rows(self, positions: list[int], compute: bool = True) -> list[list[int]]:
        """Top-K ids at each fed position (the table's own rows: read them, never change
        them). Rows not known yet are computed in one lookup when ``compute`` and a predictor
        is attached, then cached (one device read); otherwise they are the observed next
        token."""
        assert self.topk is not None
        missing = [j for j in positions if not self.known[j]]
        if compute and missing and self.predictor is not None:
            t0 = time.perf_counter()
            rows = self.predictor.topk_at(missing, self.top_k).tolist()  # [len(missing), K]
            for j, row in zip(missing, rows, strict=True):
                self.topk[j] = row
                self.known[j] = 1
            seconds = time.perf_counter() - t0
            self.lookup_s = seconds if self.lookups == 0 else 0.8 * self.lookup_s + 0.2 * seconds
            self.lookups += 1
        return [self.topk[j] for j in positions]
