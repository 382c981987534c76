"""Choosing the model's token at a tree node: greedy argmax or seeded sampling.

A :class:`TokenChooser` is bound to one verification pass's (lazy) logits and is
called once per emitted token, in order. Sampling draws one uniform number per call from a
seeded generator, so any method that emits the same tokens draws the same random numbers as
plain sequential sampling: with a fixed seed, speculative sampling reproduces it exactly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from adapld_cli.engine.types import GenerationConfig

if TYPE_CHECKING:
    from adapld_cli.engine.logits import LazyLogits


class TokenChooser:
    """Greedy or temperature / top-p sampling over the nodes of a pass."""

    def __init__(self, config: GenerationConfig) -> None:
        self.config = config
        self._generator: torch.Generator | None = None
        if not config.greedy:
            self._generator = torch.Generator(device="cpu")
            self._generator.manual_seed(
                config.seed if config.seed is not None else torch.seed() % 2**63
            )
        self._logits: LazyLogits | None = None

    def bind(self, logits: LazyLogits) -> TokenChooser:
        """Use ``logits`` (one row per node) for the following calls."""
        self._logits = logits
        return self

    def __call__(self, node: int) -> int:
        if self.config.greedy:
            return self._logits.argmax(node)
        return self._sample(self._logits.row(node))

    def _sample(self, row: torch.Tensor) -> int:
        cfg = self.config
        probs = torch.softmax(row.double() / cfg.temperature, dim=-1)  # [vocab]
        probs, order = torch.sort(probs, descending=True, stable=True)
        cdf = probs.cumsum(0)
        if cfg.top_p < 1.0:
            keep = int(torch.searchsorted(cdf, torch.tensor(cfg.top_p, dtype=cdf.dtype))) + 1
            cdf = cdf[:keep]
        u = torch.rand((), generator=self._generator, dtype=torch.float64) * cdf[-1]
        idx = min(int(torch.searchsorted(cdf, u, right=True)), cdf.numel() - 1)
        return int(order[idx])
