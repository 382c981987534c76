"""The reusable context ``R`` and what earlier forward passes left about it.

``Context`` holds the tokens (prompt + generated; the last one is *pending*: emitted but not
yet fed to the model), and per fed position ``j`` the L2-normalised hidden state ``h[j]`` of
the hooked layer and the model's top-K next-token ids ``topk[j]``. Everything is recorded
from passes the engine ran anyway; drafters only read it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from adapld_cli.engine.cost import CostModel

if TYPE_CHECKING:
    import torch


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
        import torch

        self.tokens: list[int] = list(prompt)
        self.prompt_len = len(prompt)
        self.cost = cost
        self.hidden: torch.Tensor | None = (
            torch.zeros(capacity, hidden_size, dtype=torch.float32, device=device)
            if hidden_size
            else None
        )
        self.topk: torch.Tensor | None = (
            torch.zeros(capacity, top_k, dtype=torch.long, device=device) if top_k else None
        )

    @property
    def pending(self) -> int:
        """Index of the pending token (the last one of ``R``)."""
        return len(self.tokens) - 1

    @property
    def generated(self) -> list[int]:
        return self.tokens[self.prompt_len :]

    def observed_topk(self, end: int) -> None:
        """For positions ``< end`` without computed predictions: the token that followed
        each one stands as its only top-K entry (the others are -1)."""
        import torch

        if self.topk is None or end <= 0:
            return
        self.topk[:end, 0] = torch.tensor(self.tokens[1 : end + 1], device=self.topk.device)
        self.topk[:end, 1:] = -1

    def record(self, start: int, hidden: torch.Tensor | None, topk: torch.Tensor | None) -> None:
        """Store rows for positions ``start ..`` (``hidden [m, H]``, ``topk [m, K]``)."""
        import torch

        if hidden is not None and self.hidden is not None:
            end = start + hidden.shape[0]
            self.hidden[start:end] = torch.nn.functional.normalize(hidden.float(), dim=-1)
        if topk is not None and self.topk is not None:
            self.topk[start : start + topk.shape[0]] = topk
