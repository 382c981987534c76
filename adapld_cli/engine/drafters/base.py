"""The drafting interface shared by every decoding method.

The engine loop asks a :class:`Drafter` for a :class:`~adapld_cli.engine.tree.DraftTree`
rooted at the pending token, verifies it in one forward pass, and reports back what was
accepted. The loop never knows where drafts come from; ``ar`` drafts nothing.
"""

from __future__ import annotations

from typing import Protocol

from adapld_cli.engine.context import Context
from adapld_cli.engine.tree import DraftTree


class Drafter(Protocol):
    name: str
    wants_hidden: bool  # record the hooked layer's hidden states in the context
    wants_topk: int  # K of the top-K predictions to record (0 = none)
    prompt_topk: bool  # ... for prompt positions too, at prefill
    pass_topk: bool  # ... for each pass's accepted positions
    hidden_layer: int | None

    def start(self, ctx: Context) -> None:
        """Called once after prefill (every prompt position but the last is recorded)."""

    def propose(self, ctx: Context, max_nodes: int) -> DraftTree:
        """A tree rooted at ``ctx.tokens[-1]`` with at most ``max_nodes`` draft nodes.
        ``tree.kind`` tells the loop's statistics what kind of draft it is."""
        ...

    def feedback(self, ctx: Context, tree: DraftTree, path: list[int], emitted: list[int]) -> None:
        """Called after verification: ``path`` = accepted node indices (root first),
        ``emitted`` = tokens appended to ``ctx.tokens`` this step (already appended)."""
