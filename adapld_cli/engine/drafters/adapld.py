"""AdaPLD drafting (paper §3, docs/design.md): lexical copy with reranking and an edit-cursor
prior, a semantic fallback over cached hidden states, a branched draft tree, and a draft size
chosen from recent acceptance and the measured cost of verification.

Each step collects candidate nodes, each with an estimated probability of being accepted
(a product along its path of per-token acceptance rates learned online), sorts them, and
keeps the prefix that maximises expected tokens per unit of verification cost (a pass over
``m + 1`` tokens costs ``ctx.cost.ratio(m + 1)`` single steps). On text with nothing to copy
this degrades to plain decoding; where copying pays it drafts long chains.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

import torch

from adapld_cli.engine.context import Context
from adapld_cli.engine.ngram import NgramIndex
from adapld_cli.engine.settings import AdaPLDSettings
from adapld_cli.engine.transfer import to_device
from adapld_cli.engine.tree import DraftTree
from adapld_cli.engine.types import Source

BRANCH_CONT_P = 0.5  # acceptance estimate of each token continuing a branch
SEM_SUCC_P = 0.5  # ... of a semantic branch's successor
RECYCLED_P = 0.5  # ... of a recycled successor given its parent was accepted
RECYCLED_DEPTH = 3  # levels of recycled successors under the root
CURSOR_SLACK = (-16, 32)  # a lexical hit this close to the edit cursor counts as "at cursor"


def _rank_weights(n: int) -> list[float]:
    """Shares of one probability among ``n`` ranked alternatives, proportional to 1/rank."""
    raw = [1.0 / (r + 1) for r in range(n)]
    total = sum(raw)
    return [w / total for w in raw]


class Rate:
    """Exponentially weighted hit rate: ``hits / trials`` over recent updates."""

    def __init__(self, p: float, weight: float = 3.0, decay: float = 0.7) -> None:
        self.hits, self.trials, self.decay = p * weight, weight, decay

    @property
    def p(self) -> float:
        return self.hits / self.trials if self.trials > 0 else 0.0

    def update(self, hits: float, trials: float) -> None:
        self.hits = self.hits * self.decay + hits
        self.trials = self.trials * self.decay + trials


@dataclass
class _Cand:
    p: float  # estimated probability the node is accepted
    parent: int  # index into the candidate list, -1 = root
    token: int
    source: Source


@dataclass
class _Last:
    q: int = -1  # copy source aligned with the root: the chain copies q+1.. (-1 = none)
    at_cursor: bool = False
    fallback: bool = False  # no lexical hit: the chain continues from the edit cursor
    main_nodes: int = 0  # copied-chain nodes actually verified
    chain_first: int | None = None  # first token of the proposed chain (verified or not)
    sem_first: frozenset[int] = frozenset()  # proposed depth-1 semantic tokens
    branch_first: frozenset[int] = frozenset()  # proposed first-token alternatives
    recycled_first: frozenset[int] = frozenset()  # proposed depth-1 recycled successors
    # the edit cursor's chain where it leaves the main chain (:meth:`_cursor_branch`)
    cursor_depth: int = -1  # depth it leaves at (-1 = none drafted)
    cursor_token: int = -1  # its token there
    cursor_nodes: frozenset[int] = frozenset()  # its verified tree nodes


class AdaPLDDrafter:
    name = "adapld"

    def __init__(self, settings: AdaPLDSettings) -> None:
        """``settings`` resolved for the device (:meth:`AdaPLDSettings.resolve`)."""
        if not settings.resolved:
            raise ValueError("AdaPLDDrafter needs resolved settings (AdaPLDSettings.resolve)")
        s = self.s = settings
        self.semantic = bool(s.semantic)
        self.wants_hidden = s.rerank or self.semantic
        self.wants_topk = s.top_k if (s.branches or self.semantic) else 0
        self.prompt_topk = bool(s.prompt_topk)
        self.pass_topk = bool(s.pass_topk)
        self.hidden_layer = s.hidden_layer
        self.index = NgramIndex(s.min_ctxt, s.ctxt)
        self.succ: dict[int, list[int]] = {}  # token -> top-K predicted after its latest occurrence
        self.cursor: int | None = None  # source position aligned with the pending token
        self.prev_ok = True  # the last lexical step accepted at least one copied token
        # per-token acceptance of the copied chain, keyed by (prev_ok, at_cursor)
        self.lex = {
            (True, True): Rate(0.95),
            (True, False): Rate(0.8),
            (False, True): Rate(0.6),
            (False, False): Rate(0.3),
        }
        self.branch = Rate(0.3)  # a branch is right given the chain's first token failed
        self.sem = Rate(0.2)  # a semantic tree yields an accepted token
        self.cursor_rate = Rate(0.3)  # per-token acceptance of a cursor chain with no n-gram hit
        self.cursor_alt = Rate(0.5)  # the cursor's token is right where the two chains part
        self.recycled = Rate(0.2)  # a recycled successor of the root is the model's next token
        self._last = _Last()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, ctx: Context) -> None:
        self.index.extend(ctx.tokens)
        self._learn_successors(ctx, 0, ctx.pending)

    def feedback(self, ctx: Context, tree: DraftTree, path: list[int], emitted: list[int]) -> None:
        root_pos = len(ctx.tokens) - len(emitted) - 1
        last = self._last
        accepted = [tree.sources[i] for i in path[1:]]
        k_main = sum(1 for src in accepted if src is Source.LEXICAL)
        k_cursor = self._cursor_feedback(path, emitted, k_main)
        rate = self.cursor_rate if last.fallback else self.lex[(self.prev_ok, last.at_cursor)]
        if last.main_nodes:
            failed = 1 if k_main < last.main_nodes else 0
            rate.update(k_main, k_main + failed)
        elif last.chain_first is not None:
            # the chain was not worth verifying: judge its first token against what the
            # model emitted anyway, so a rate that stopped drafting can recover
            k_main = int(emitted[0] == last.chain_first)
            rate.update(k_main, 1.0)
        if last.chain_first is not None and not last.fallback:
            self.prev_ok = k_main > 0 or k_cursor > 0
        if k_main == 0:
            verified = {tree.tokens[i] for i in tree.children[0].values()} & last.branch_first
            if verified:  # first-token alternatives verified (recycled successors aside)
                self.branch.update(float(emitted[0] in verified), 1.0)
            if last.sem_first:  # verified or not: did the model pick a semantic candidate?
                self.sem.update(float(emitted[0] in last.sem_first), 1.0)
            if last.recycled_first:
                self.recycled.update(float(emitted[0] in last.recycled_first), 1.0)
        # the copy source advances with the output, one token per emitted token; a source
        # away from the cursor whose first token failed, or that the cursor's chain
        # overtook, does not take the cursor with it
        moved = last.q >= 0 and k_cursor == 0
        moved = moved and (k_main > 0 or last.at_cursor or self.cursor is None)
        base = last.q if moved else self.cursor
        self.cursor = None if base is None else base + len(emitted)
        self.index.extend(emitted)
        self._learn_successors(ctx, root_pos, root_pos + len(path))

    def _cursor_feedback(self, path: list[int], emitted: list[int], k_main: int) -> int:
        """Learn :attr:`cursor_alt` from a step whose output reached the point where the
        cursor's chain left the main chain (verified there or not: which one did the model
        follow?); returns how many of the cursor chain's nodes were accepted."""
        last = self._last
        d = last.cursor_depth
        if d < 0 or k_main < d:
            return 0
        self.cursor_alt.update(float(emitted[d] == last.cursor_token), 1.0)
        k_cursor = sum(1 for i in path[1:] if i in last.cursor_nodes)
        if k_cursor:
            failed = 1 if k_cursor < len(last.cursor_nodes) else 0
            self.cursor_rate.update(k_cursor - 1, k_cursor - 1 + failed)
        return k_cursor

    def _learn_successors(self, ctx: Context, start: int, end: int) -> None:
        """Token-Recycling table: token at position j -> top-K predicted at j."""
        if ctx.topk is None or end <= start:
            return
        toks = ctx.tokens
        for j, row in enumerate(ctx.topk[start:end], start):
            self.succ[toks[j]] = row

    # -- drafting ----------------------------------------------------------------------------

    def propose(self, ctx: Context, max_nodes: int) -> DraftTree:
        s = self.s
        max_nodes = min(max_nodes, self._budget(ctx))
        tree = DraftTree.root(ctx.tokens[-1])
        tree.looked_up = True
        self._last = _Last()
        if max_nodes <= 0:
            return tree
        cands: list[_Cand] = []
        cursor_cands: list[int] = []  # the cursor's chain, where it leaves the main chain
        _, hits = self.index.longest_match()
        if hits:
            tree.kind = "lexical"
            q, at_cursor = self._choose(ctx, hits)
            self._last = _Last(q=q, at_cursor=at_cursor)
            alpha = self.lex[(self.prev_ok, at_cursor)].p
            self._copy_chain(ctx, q, alpha, cands, max_nodes)
            if s.branches and s.cursor and not at_cursor and cands:
                cursor_cands = self._cursor_branch(ctx, cands, max_nodes)
            if s.branches and cands and ctx.topk is not None:
                self._branches(ctx, q, alpha, cands)
        else:
            if s.cursor and self.cursor is not None and 0 <= self.cursor < ctx.pending:
                self._last = _Last(q=self.cursor, at_cursor=True, fallback=True)
                self._copy_chain(ctx, self.cursor, self.cursor_rate.p, cands, max_nodes)
            if (
                self.semantic
                and ctx.hidden is not None
                and ctx.topk is not None
                and ctx.pending >= 2
            ):
                tree.kind = "semantic" if self._semantic(ctx, cands) else tree.kind
        recycle = s.branches and s.recycle and ctx.topk is not None
        recycled = len(cands)
        if recycle and not ctx.cost.flat and not hits:  # weighed like every other draft
            self._recycle(ctx, cands, max_nodes)
        chosen = self._select(ctx, cands, max_nodes)
        free = max_nodes - len(chosen)
        if recycle and ctx.cost.flat and free > 0:
            self._recycle(ctx, cands, free)
            extra = sorted(range(recycled, len(cands)), key=lambda i: -cands[i].p)
            chosen += extra[:free]
        where = self._build(tree, cands, chosen)
        last = self._last
        last.main_nodes = sum(1 for src in tree.sources if src is Source.LEXICAL)
        last.cursor_nodes = frozenset(where[i] for i in cursor_cands if i in where)
        own = set(cursor_cands)
        roots = [c for i, c in enumerate(cands[:recycled]) if c.parent == -1 and i not in own]
        last.chain_first = next((c.token for c in roots if c.source is Source.LEXICAL), None)
        last.sem_first = frozenset(c.token for c in roots if c.source is Source.SEMANTIC)
        last.branch_first = frozenset(c.token for c in roots if c.source is Source.BRANCH)
        last.recycled_first = frozenset(c.token for c in cands[recycled:] if c.parent == -1)
        return tree

    def _copy_chain(
        self, ctx: Context, q: int, alpha: float, cands: list[_Cand], max_nodes: int
    ) -> None:
        """The main chain: tokens after the copy source ``q``, each ``alpha`` times as likely
        to be accepted as its parent."""
        p, parent = 1.0, -1
        for t in ctx.tokens[q + 1 : q + 1 + min(self.s.max_draft_len, max_nodes)]:
            p *= alpha
            cands.append(_Cand(p, parent, t, Source.LEXICAL))
            parent = len(cands) - 1

    def _cursor_branch(self, ctx: Context, cands: list[_Cand], max_nodes: int) -> list[int]:
        """Where the copy source lies away from the edit cursor (a rename's new name also
        occurs in the instruction, or earlier in the output), the cursor's own chain too,
        branching off the main chain (``cands``, just drafted) where the two part: its
        first token :attr:`cursor_alt` times as likely as the main chain's node before
        (learned from which chain the model followed there), each next one
        :attr:`cursor_rate` times its parent's. Returns its candidates' indices (none where
        the chains agree)."""
        c = self.cursor
        if c is None or not 0 <= c < ctx.pending:
            return []
        src = ctx.tokens[c + 1 : c + 1 + min(self.s.max_draft_len, max_nodes)]
        n = min(len(src), len(cands))
        d = next((i for i in range(n) if cands[i].token != src[i]), n)  # where they part
        if d == n:
            return []
        last = self._last
        last.cursor_depth, last.cursor_token = d, src[d]
        parent = d - 1  # the main chain's node before they part (-1: the root)
        p = (cands[parent].p if d else 1.0) * self.cursor_alt.p
        added = []
        for t in src[d:]:
            cands.append(_Cand(p, parent, t, Source.BRANCH))
            parent = len(cands) - 1
            added.append(parent)
            p *= self.cursor_rate.p
        return added

    def _branches(self, ctx: Context, q: int, alpha: float, cands: list[_Cand]) -> None:
        """First-token alternatives: the model's top-K at the copy source, minus the chain's
        first token, each extended by a reuse continuation. Together they share the
        probability that the chain's first token fails and a branch is right. The top-K at
        ``q`` is computed on demand when it may pay (:meth:`_lookup`)."""
        gain = (1.0 - alpha) * self.branch.p * (1.0 + BRANCH_CONT_P)
        row = ctx.topk_rows([q], self._lookup(ctx, [q], gain, cands))[0]
        alts = [t for t in row if t != cands[0].token]
        for b, w in zip(alts, _rank_weights(len(alts)), strict=True):
            pb = (1.0 - alpha) * self.branch.p * w
            cands.append(_Cand(pb, -1, b, Source.BRANCH))
            parent = len(cands) - 1
            for t in self._continuation(ctx.tokens, b):
                pb *= BRANCH_CONT_P
                cands.append(_Cand(pb, parent, t, Source.BRANCH))
                parent = len(cands) - 1

    def _choose(self, ctx: Context, hits: list[int]) -> tuple[int, bool]:
        """Pick the copy source among lexical hits: the edit cursor first, then the
        occurrence whose preceding hidden state is most like the current one, else the latest."""
        s = self.s
        if s.cursor and self.cursor is not None:
            c = self.cursor
            i = bisect_left(hits, c)
            near = [
                h
                for h in hits[max(0, i - 1) : i + 1]
                if CURSOR_SLACK[0] <= h - c <= CURSOR_SLACK[1]
            ]
            if near:
                return min(near, key=lambda h: abs(h - c)), True
        P = ctx.pending
        if s.rerank and ctx.hidden is not None and len(hits) > 1 and P >= 1:
            cand = [h for h in hits[-s.max_candidates :] if h >= 1]
            if cand:
                hidden = ctx.unit_hidden(P)
                idx = to_device(cand, hidden.device) - 1
                sims = hidden.index_select(0, idx) @ hidden[P - 1]  # [len(cand)]
                return cand[int(sims.argmax())], False
        return hits[-1], False

    def _continuation(self, toks: list[int], b: int) -> list[int]:
        """Tokens that followed ``(pending, b)`` last time, else ``b``'s cached successor."""
        n = self.s.branch_len
        if n <= 0:
            return []
        if self.index.min_n <= 2 <= self.index.max_n:
            hits = self.index.lookup((toks[-1], b), len(toks))
            if hits:
                e = hits[-1]
                return toks[e + 1 : e + 1 + n]
        nxt = self.succ.get(b)
        return nxt[:1] if nxt else []

    def _semantic(self, ctx: Context, cands: list[_Cand]) -> bool:
        """No lexical hit: find cached positions whose preceding state resembles the current
        one (cosine) and draft their top-K predictions, each with one cached successor.
        Returns whether any candidate cleared the similarity floor."""
        s, P = self.s, ctx.pending
        lo = 1 if s.window <= 0 else max(1, P - s.window)
        if lo >= P - 1:
            return False
        hidden = ctx.unit_hidden(P)
        sims = hidden[lo - 1 : P - 1] @ hidden[P - 1]  # [P-lo]: state before j vs before P
        vals, idx = sims.topk(min(s.tau, sims.shape[0]))
        # one device read: the similarities with their offsets (exact in float32 below 2**24)
        pairs = torch.stack((vals, idx.to(vals.dtype))).T.tolist()
        starts = [lo + int(i) for v, i in pairs if v >= s.sim_floor]
        taken = {c.token for c in cands if c.parent == -1}
        alts: list[int] = []
        if starts:
            gain = self.sem.p * (1.0 + SEM_SUCC_P)
            for row in ctx.topk_rows(starts, self._lookup(ctx, starts, gain, cands)):
                alts += [b for b in row if b not in taken and b not in alts]
        gamma = self.sem.p
        for b, w in zip(alts, _rank_weights(len(alts)), strict=True):
            pb = gamma * w
            cands.append(_Cand(pb, -1, b, Source.SEMANTIC))
            nxt = self.succ.get(b)
            if nxt:
                cands.append(_Cand(pb * SEM_SUCC_P, len(cands) - 1, nxt[0], Source.SEMANTIC))
        return bool(alts)

    def _recycle(self, ctx: Context, cands: list[_Cand], room: int) -> None:
        """Up to ``room`` recycled successors (Token Recycling): the top-K the model
        predicted after the root's token last time, after each of those tokens', and so on
        for :data:`RECYCLED_DEPTH` levels, breadth first, each level ``RECYCLED_P`` times as
        likely as its parent and ranked by 1/rank, the first level at the rate
        :attr:`recycled` (learned like the semantic fallback's). Where every pass costs the
        same whatever its size (``ctx.cost.flat``) they fill the rows the other drafts leave
        free and never displace those (their estimates rank them among themselves only);
        where a pass costs by its size (a CPU) a step with no lexical hit weighs them with
        its other candidates (a cursor chain, the semantic fallback's) by the cost model."""
        taken = {c.token for c in cands if c.parent == -1}
        level = [(-1, ctx.tokens[-1], self.recycled.p)]  # (parent, token, p)
        added = 0
        for _ in range(RECYCLED_DEPTH):
            nxt = []
            for parent, token, p in level:
                row = [t for t in self.succ.get(token, ()) if parent != -1 or t not in taken]
                for t, w in zip(row, _rank_weights(len(row)), strict=True):
                    if added >= room:
                        return
                    pt = p * w * (1.0 if parent == -1 else RECYCLED_P)
                    cands.append(_Cand(pt, parent, t, Source.BRANCH))
                    nxt.append((len(cands) - 1, t, pt))
                    added += 1
            level = nxt

    def _lookup(self, ctx: Context, positions: list[int], gain: float, cands: list[_Cand]) -> bool:
        """Whether to compute the top-K at ``positions`` now (one LM-head pass over them):
        when its expected ``gain`` in tokens beats what its cost (in decode steps) would earn
        spent on the tree already drafted. ``settings.topk_lookup`` forces it on or off."""
        forced = self.s.topk_lookup
        if forced is not None or not ctx.can_lookup(positions):
            return bool(forced)
        return gain > ctx.lookup_ratio() * self._best(ctx, cands, self._budget(ctx))[1]

    def _budget(self, ctx: Context) -> int:
        """The most nodes a step drafts: ``node_budget``, or every row of the one static
        shape when passes all run at it (uniform: the rows are computed anyway)."""
        return max(self.s.node_budget, ctx.cost.flat - 1)

    def _best(self, ctx: Context, cands: list[_Cand], max_nodes: int) -> tuple[list[int], float]:
        """The most probable prefix of candidates that maximises expected tokens per unit of
        verification cost, and that value (tokens per single-step cost)."""
        order = sorted(range(len(cands)), key=lambda i: -cands[i].p)[:max_nodes]
        cost = ctx.cost.ratio
        best_m, best, total = 0, 1.0 / cost(1), 1.0
        for m, i in enumerate(order, 1):
            total += cands[i].p
            value = total / cost(m + 1)
            if value > best:
                best, best_m = value, m
        return order[:best_m], best

    def _select(self, ctx: Context, cands: list[_Cand], max_nodes: int) -> list[int]:
        """Indices of the candidates to verify (parents always precede children): all of the
        most probable ``max_nodes`` when not adaptive, else :meth:`_best`'s prefix."""
        if not self.s.adaptive:
            return sorted(range(len(cands)), key=lambda i: -cands[i].p)[:max_nodes]
        return self._best(ctx, cands, max_nodes)[0]

    def _build(self, tree: DraftTree, cands: list[_Cand], chosen: list[int]) -> dict[int, int]:
        """Add the ``chosen`` candidates to ``tree``; returns candidate -> tree node."""
        where: dict[int, int] = {-1: 0}
        for i in sorted(chosen):  # insertion order: parents before children
            c = cands[i]
            if c.parent in where:
                where[i] = tree.add(c.token, where[c.parent], c.source)
        return where
