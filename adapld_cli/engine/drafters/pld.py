"""Prompt lookup decoding (PLD): one copied chain of fixed length, first match.

Mirrors transformers' ``prompt_lookup_num_tokens`` candidate generator (n-gram sizes from
``max_ngram`` down to 1, earliest occurrence, ``num_tokens`` copied) but runs in the shared
loop, so its statistics compare directly with AdaPLD's.
"""

from __future__ import annotations

from adapld_cli.engine.context import Context
from adapld_cli.engine.ngram import NgramIndex
from adapld_cli.engine.tree import DraftTree
from adapld_cli.engine.types import Source


class PLDDrafter:
    name = "pld"
    wants_hidden = False
    wants_topk = 0
    prompt_topk = False
    pass_topk = False
    hidden_layer = None

    def __init__(self, num_tokens: int = 10, max_ngram: int = 3) -> None:
        self.num_tokens = num_tokens
        self.index = NgramIndex(1, max_ngram)

    def start(self, ctx: Context) -> None:
        self.index.extend(ctx.tokens)

    def propose(self, ctx: Context, max_nodes: int) -> DraftTree:
        tree = DraftTree.root(ctx.tokens[-1])
        tree.looked_up = True
        _, hits = self.index.longest_match()
        if hits:
            q = hits[0]
            tree.kind = "lexical"
            tree.add_chain(
                ctx.tokens[q + 1 : q + 1 + self.num_tokens], 0, Source.LEXICAL, max_nodes
            )
        return tree

    def feedback(self, ctx: Context, tree: DraftTree, path: list[int], emitted: list[int]) -> None:
        self.index.extend(emitted)
