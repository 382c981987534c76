"""Plain autoregressive decoding: no drafts, one token per forward pass (the baseline)."""

from __future__ import annotations

from adapld_cli.engine.context import Context
from adapld_cli.engine.tree import DraftTree


class ARDrafter:
    name = "ar"
    wants_hidden = False
    wants_topk = 0
    prompt_topk = False
    pass_topk = False
    hidden_layer = None

    def start(self, ctx: Context) -> None:
        pass

    def propose(self, ctx: Context, max_nodes: int) -> DraftTree:
        return DraftTree.root(ctx.tokens[-1])

    def feedback(self, ctx: Context, tree: DraftTree, path: list[int], emitted: list[int]) -> None:
        pass
