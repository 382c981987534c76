"""Drafts copied from a reference text: the predicted output a client sends with a request.

:class:`WithReference` wraps any drafter. Every step it asks the wrapped drafter for its tree
and also looks the context's last tokens up in the reference (n-grams of 3, 2, then 1
tokens). The reference's chain replaces the wrapped drafter's tree when the reference is
being followed (the match lies where the previous reference chain left off), when its match
is a full 3-gram (a repair's rejected answer beats the original file the prompt carries,
which the answer has moved away from), or when the wrapped drafter found nothing to copy
(no n-gram hit in the context: its guesses then, a cursor chain, recycled or semantic
candidates, give way to the reference's). Either way the tree is verified like any other,
so the output is still exactly plain decoding's; the reference only decides how much each
pass accepts.
A chain is as long as pays on this device: with ``p`` the rate at which the reference's
tokens were accepted so far (kept apart for a followed reference and a fresh match, a
decaying count of accepted tokens and of chains cut short), the length ``L`` that maximizes
the expected tokens of the pass, ``1 + p + ... + p^L``, over its cost (the engine's cost
model). A reference the answer follows gets long chains; one it has left (a repair that
rewrites, a prediction that was wrong) gets short ones instead of a wasted wide pass each
step.
The wrapped drafter sees every step's feedback (its index and statistics stay current).
"""

from __future__ import annotations

from collections.abc import Sequence

from adapld_cli.engine.context import Context
from adapld_cli.engine.drafters.base import Drafter
from adapld_cli.engine.ngram import NgramIndex
from adapld_cli.engine.tree import DraftTree
from adapld_cli.engine.types import Source

REFERENCE_NGRAM = 3  # longest n-gram looked up in the reference
REFERENCE_CHAIN = 128  # most tokens copied from the reference per pass (node budget too)
PRIOR = (9.0, 1.0)  # accepted tokens, chains cut short, before any: a rate of 0.9 (10 tokens)
DECAY = 0.9  # weight of the counts so far at each chain's outcome


class WithReference:
    """``inner``'s drafts, or chains copied from ``reference`` (see the module contract)."""

    def __init__(self, inner: Drafter, reference: Sequence[int]) -> None:
        self.inner = inner
        self.name = inner.name
        self.wants_hidden = inner.wants_hidden
        self.wants_topk = inner.wants_topk
        self.prompt_topk = inner.prompt_topk
        self.pass_topk = inner.pass_topk
        self.hidden_layer = inner.hidden_layer
        self.index = NgramIndex(1, REFERENCE_NGRAM)
        self.index.extend(reference)
        self.cursor: int | None = None  # reference position of the pending token, if followed
        self._used: int | None = None  # end position of the match copied this step
        self._chain = 0  # length of the chain copied this step
        self._aligned = False  # ... whether it followed the reference
        # per followed / fresh: [accepted tokens, chains cut short], decaying
        self.counts = {True: list(PRIOR), False: list(PRIOR)}

    def start(self, ctx: Context) -> None:
        self.inner.start(ctx)

    def propose(self, ctx: Context, max_nodes: int) -> DraftTree:
        tree = self.inner.propose(ctx, max_nodes)
        self._used = None
        hit, aligned, n = self._match(ctx.tokens)
        strong = aligned or n == REFERENCE_NGRAM or tree.kind != "lexical"
        if hit is None or max_nodes <= 0 or not strong:
            return tree
        chain = self.index.tokens[hit + 1 : hit + 1 + min(REFERENCE_CHAIN, max_nodes)]
        chain = chain[: self.length(ctx, self.rate(aligned), len(chain))]
        if not chain:
            return tree
        own = DraftTree.root(ctx.tokens[-1])
        own.looked_up = True
        own.kind = "lexical"
        own.add_chain(chain, 0, Source.LEXICAL, max_nodes)
        self._used, self._chain, self._aligned = hit, len(chain), aligned
        return own

    def rate(self, aligned: bool) -> float:
        """The rate at which a reference token is accepted (followed or fresh match)."""
        accepted, cut = self.counts[aligned]
        return accepted / (accepted + cut)

    @staticmethod
    def length(ctx: Context, p: float, limit: int) -> int:
        """The chain length up to ``limit`` with the most expected tokens per pass cost when
        each token is accepted with probability ``p`` after the one before (module
        contract); 0 when a single step pays best."""
        best, best_len, gain, q = 1.0 / ctx.cost.ratio(1), 0, 1.0, 1.0
        for n in range(1, limit + 1):
            q *= p
            gain += q
            value = gain / ctx.cost.ratio(n + 1)
            if value > best:
                best, best_len = value, n
        return best_len

    def _match(self, tokens: list[int]) -> tuple[int | None, bool, int]:
        """End position in the reference of the longest n-gram ending the context, the one
        at the cursor when it is among them; whether it was at the cursor; the n-gram's
        length (0: no hit)."""
        for n in range(REFERENCE_NGRAM, 0, -1):
            if len(tokens) < n:
                continue
            hits = self.index.lookup(tokens[-n:], len(self.index))
            if not hits:
                continue
            if self.cursor is not None and self.cursor in hits:
                return self.cursor, True, n
            after = [h for h in hits if self.cursor is None or h >= self.cursor]
            return (after or hits)[0], False, n
        return None, False, 0

    def feedback(self, ctx: Context, tree: DraftTree, path: list[int], emitted: list[int]) -> None:
        if self._used is not None:
            self.cursor = self._used + len(emitted)
            accepted = len(emitted) - 1
            counts = self.counts[self._aligned]
            counts[0] = counts[0] * DECAY + accepted
            counts[1] = counts[1] * DECAY + (accepted < self._chain)
        elif self.cursor is not None:
            self.cursor += len(emitted)
        self.inner.feedback(ctx, tree, path, emitted)
