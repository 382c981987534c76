"""The AdaPLD drafter's decisions, without a model: a hand-built context (tokens, and top-K
rows where a test needs them) and a stub cost model.

- the cost/benefit cut: a flat verification cost drafts the whole copied chain, a steep one
  drafts nothing;
- the copy source: the edit cursor wins over the latest occurrence of the same n-gram;
- rate recovery: a chain not worth verifying is still judged against the token the model
  emitted, so a low acceptance rate climbs back and drafting resumes (the bug fixed in
  1fbbc3d: skipped drafts used to leave the rate stuck);
- branches: first-token alternatives are drafted where the copy source has real top-K
  predictions, and not where its only "prediction" is the token that followed it;
- recycled successors: where passes all run at one shape, the rows other drafts leave free
  hold the top-K predicted after the root's token last time, and after those, never in
  place of a copied chain's nodes; nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable

from adapld_cli.engine.context import Context
from adapld_cli.engine.drafters.adapld import AdaPLDDrafter, Rate
from adapld_cli.engine.settings import AdaPLDSettings
from adapld_cli.engine.types import Source

BASE = list(range(10, 50))  # 40 distinct tokens
NGRAM = BASE[1:5]  # the query: the last 4 tokens of every context below


class StubCost:
    """A cost model whose ``ratio(n)`` (cost of an n-token pass in single steps) is given;
    ``flat``: passes of up to that many tokens run at one shape (``CostModel.flat``)."""

    def __init__(self, ratio: Callable[[int], float], flat: int = 0) -> None:
        self.ratio, self.flat = ratio, flat


FLAT = StubCost(lambda n: 1.0)  # verification is free: every candidate pays
STEEP = StubCost(lambda n: float(n) ** 2)  # nothing can pay for its own pass
LINEAR_HALF = StubCost(lambda n: 1.0 + 0.5 * (n - 1))  # one draft pays iff it is > 50% likely


def _settings(**kw) -> AdaPLDSettings:
    """No hidden states needed: rerank and the semantic fallback off unless asked; resolved
    for a CPU, as the loop resolves them."""
    kw = {"rerank": False, "semantic": False, "branches": False, **kw}
    return AdaPLDSettings(**kw).resolve("cpu")


def _context(tokens: list[int], cost: StubCost, top_k: int = 0) -> Context:
    return Context(tokens, len(tokens) + 128, 0, top_k, "cpu", cost)


def _drafter(ctx: Context, **kw) -> AdaPLDDrafter:
    drafter = AdaPLDDrafter(_settings(**kw))
    drafter.start(ctx)
    return drafter


def _chain(tree) -> list[int]:
    assert tree.is_chain
    return tree.tokens[1:]


def test_flat_cost_drafts_the_long_chain():
    tokens = [*BASE, 99, 98, *BASE[:5]]  # BASE[1:5] occurred once before, ending at 4
    ctx = _context(tokens, FLAT)
    tree = _drafter(ctx).propose(ctx, 30)
    assert tree.kind == "lexical"
    assert _chain(tree) == tokens[5:35]  # every node up to the budget: the copy after 4
    assert set(tree.sources[1:]) == {Source.LEXICAL}


def test_steep_cost_drafts_nothing():
    tokens = [*BASE, 99, 98, *BASE[:5]]
    ctx = _context(tokens, STEEP)
    tree = _drafter(ctx).propose(ctx, 30)
    assert tree.kind == "lexical" and len(tree) == 1  # found a copy, not worth a pass


def test_cursor_wins_over_the_latest_occurrence():
    # NGRAM occurs twice: at 1..4 followed by 70.., and at 11..14 followed by 80..
    tokens = [0, *NGRAM, 70, 71, 72, 3, 3, 3, *NGRAM, 80, 81, 82, 5, 5, *NGRAM]
    first, latest = 4, 14  # end positions of the two occurrences
    for cursor, expect in ((first, 70), (None, 80)):
        ctx = _context(tokens, FLAT)
        drafter = _drafter(ctx)
        drafter.cursor = cursor  # the copy source aligned with the pending token
        tree = drafter.propose(ctx, 3)
        assert _chain(tree)[0] == expect, cursor
        assert drafter._last.q == (first if cursor is not None else latest)
    ctx = _context(tokens, FLAT)
    drafter = _drafter(ctx, cursor=False)  # cursor switched off: the latest wins
    drafter.cursor = first
    assert _chain(drafter.propose(ctx, 3))[0] == 80


def test_a_failed_copy_away_from_the_cursor_leaves_the_cursor():
    """A rename's new name also occurs in the instruction: its n-gram hit there (far from the
    cursor) drafts what followed it in the instruction and fails at the first token. The
    cursor (where the file is being copied) then stays aligned with the output instead of
    jumping to the instruction (it did, and the next no-hit step's cursor chain copied the
    instruction); an accepted copy still moves it."""
    tokens = [*range(100, 160), 60, 61, 62, 63, 92, 93, 5, 60, 61, 62, 63]
    q, cursor = 63, 5  # the hit's end (its chain: 92, 93, ...), far from the cursor
    for path, emitted, moved_to in (([0], [70], cursor + 1), ([0, 1], [92, 71], q + 2)):
        ctx = _context(tokens, FLAT)
        drafter = _drafter(ctx)
        drafter.cursor = cursor
        tree = drafter.propose(ctx, 3)
        assert drafter._last.q == q and not drafter._last.at_cursor
        assert _chain(tree) == [92, 93, 5]
        ctx.tokens.extend(emitted)
        drafter.feedback(ctx, tree, path, emitted)
        assert drafter.cursor == moved_to, emitted


def test_the_cursor_chain_branches_off_a_copy_from_elsewhere():
    """The copy source lies away from the edit cursor (a renamed name's hit in the
    instruction): the cursor's own chain joins the tree where the two chains part, and when
    the model follows it the cursor keeps its place and its rate learns."""
    instruction = [60, 61, 62, 63, 92, 93, 94]  # positions 60..66: the hit ends at 63
    tokens = [*range(100, 160), *instruction, 5, 60, 61, 62, 63]
    cursor = 20  # aligned with the pending 63: the file goes on 121, 122, ...
    ctx = _context(tokens, FLAT)
    drafter = _drafter(ctx, branches=True)
    drafter.cursor, drafter.cursor_rate = cursor, Rate(0.9)
    tree = drafter.propose(ctx, 8)
    roots = {tree.tokens[i]: i for i in tree.children[0].values()}
    assert drafter._last.q == 63 and set(roots) == {92, 121}
    assert tree.sources[roots[92]] is Source.LEXICAL and tree.sources[roots[121]] is Source.BRANCH
    branch = [roots[121], *tree.children[roots[121]].values()]
    assert [tree.tokens[i] for i in branch] == [121, 122]
    before = drafter.cursor_alt.p
    emitted = [121, 122, 999]  # the model follows the file
    ctx.tokens.extend(emitted)
    drafter.feedback(ctx, tree, [0, *branch], emitted)
    assert drafter.cursor == cursor + 3 and drafter.cursor_alt.p > before and drafter.prev_ok

    # the chains agree on two tokens, then part: the branch hangs off the second
    tokens = [*range(100, 160), 60, 61, 62, 63, 121, 122, 94, 5, 60, 61, 62, 63]
    ctx = _context(tokens, FLAT)
    drafter = _drafter(ctx, branches=True)
    drafter.cursor = cursor
    tree = drafter.propose(ctx, 8)
    assert drafter._last.cursor_depth == 2 and drafter._last.cursor_token == 123
    node = {tree.tokens[i]: i for i in tree.children[0].values()}[121]
    node = tree.children[node][122]
    assert set(tree.children[node]) == {94, 123}
    emitted = [121, 122, 123, 999]  # two tokens both chains copy, then the file's
    ctx.tokens.extend(emitted)
    path = [0, tree.children[0][121], node, tree.children[node][123]]
    drafter.feedback(ctx, tree, path, emitted)
    assert drafter.cursor == cursor + 4  # not the instruction's 63 + 4
    # teeth: no branch at the cursor itself, nor with the cursor or branches switched off
    for kw, at in (({}, 62), ({"cursor": False}, cursor), ({"branches": False}, cursor)):
        ctx = _context(tokens, FLAT)
        drafter = _drafter(ctx, **{"branches": True, **kw})
        drafter.cursor = at
        tree = drafter.propose(ctx, 8)
        assert tree.is_chain and drafter._last.cursor_depth == -1, kw


def test_low_rate_recovers_after_skipped_drafts():
    """Rates start far too low for a draft to pay; the model keeps emitting exactly what the
    copy predicts, so the rates climb and drafting resumes within a few steps."""
    tokens = [*BASE, 99, 98, *BASE[:5]]
    ctx = _context(tokens, LINEAR_HALF)
    drafter = _drafter(ctx)
    for key in drafter.lex:
        drafter.lex[key] = Rate(0.1)
    skipped = 0
    for _ in range(8):
        tree = drafter.propose(ctx, 16)
        if len(tree) > 1:
            break
        skipped += 1
        emitted = [ctx.tokens[drafter._last.q + 1]]  # the model emits the copied token
        ctx.tokens.extend(emitted)
        drafter.feedback(ctx, tree, [0], emitted)
    assert skipped >= 1, "the low rate must first skip drafting"
    assert len(tree) > 1, "the rate never recovered"
    assert _chain(tree) == ctx.tokens[drafter._last.q + 1 : drafter._last.q + len(tree)]


def test_branches_only_where_real_topk_exists():
    tokens = [*BASE, 99, 98, *BASE[:5]]
    q = 4  # the copy source: its chain starts with BASE[5] == 15
    for real, expect_branches in ((True, True), (False, False)):
        ctx = _context(tokens, FLAT, top_k=3)
        if real:  # the model's own top-3 at the copy source: the chain token + two others
            ctx.record(q, None, [[15, 60, 61]])
        else:  # observed top-K: only the token that followed, as on a CPU prefill
            ctx.observed_topk(len(tokens) - 1)
        drafter = _drafter(ctx, branches=True)
        tree = drafter.propose(ctx, 40)
        roots = {tree.tokens[i]: tree.sources[i] for i in tree.children[0].values()}
        assert roots[15] is Source.LEXICAL
        branch_roots = {t for t, src in roots.items() if src is Source.BRANCH}
        assert branch_roots == ({60, 61} if expect_branches else set()), real
        assert (Source.BRANCH in tree.sources) is expect_branches


def test_free_rows_of_one_shape_take_recycled_successors():
    base = list(range(100, 130))
    tokens = [*base, 200, 201, 105]  # no n-gram hit; the root 105 followed position 5 before
    shape = StubCost(lambda n: 1.0, flat=80)  # uniform passes of 80 rows
    trees = {}
    for name, cost in (("shape", shape), ("free", FLAT), ("steep", STEEP)):
        ctx = _context(tokens, cost, top_k=3)
        ctx.record(5, None, [[110, 111, 112]])  # predicted after 105 last time
        ctx.record(10, None, [[120, 121, 122]])  # ... after 110
        drafter = _drafter(ctx, branches=True)
        trees[name] = tree = drafter.propose(ctx, 40)
        if name == "shape":
            assert drafter._last.recycled_first == {110, 111, 112}
    tree = trees["shape"]
    roots = {tree.tokens[i]: i for i in tree.children[0].values()}
    assert set(roots) == {110, 111, 112}
    assert {tree.tokens[i] for i in tree.children[roots[110]].values()} == {120, 121, 122}
    assert set(tree.sources[1:]) == {Source.BRANCH}
    # where a pass costs by its size (a CPU) a no-hit step's recycled successors are weighed
    # like any draft: free verification takes them all, a pass they cannot pay for none
    assert trees["free"].tokens == tree.tokens and trees["free"].parents == tree.parents
    assert len(trees["steep"]) == 1
    ctx = _context(tokens, shape, top_k=3)
    ctx.record(5, None, [[110, 111, 112]])
    assert len(_drafter(ctx, branches=True, recycle=False).propose(ctx, 40)) == 1  # ablated
    # the model takes a recycled successor: the recycling rate learns it, the first-token
    # alternatives' rate (none were drafted) is left alone
    drafter = _drafter(ctx, branches=True)
    tree = drafter.propose(ctx, 40)
    node = next(i for i in tree.children[0].values() if tree.tokens[i] == 111)
    before = (drafter.recycled.p, drafter.branch.p)
    ctx.tokens.extend([111, 120])
    drafter.feedback(ctx, tree, [0, node], [111, 120])
    assert drafter.recycled.p > before[0] and drafter.branch.p == before[1]

    copy = [*BASE, 99, 98, *BASE[:5]]  # a copied chain longer than the step's 30 nodes
    ctx = _context(copy, shape, top_k=3)
    ctx.record(len(copy) - 6, None, [[70, 71, 72]])  # 14 (the root) was followed by these
    tree = _drafter(ctx, branches=True).propose(ctx, 30)
    assert _chain(tree) == copy[5:35]  # the chain fills the step: nothing recycled
    # a chain of 10 after the hit ending at 4; the root 14 last came after 55 (position 9)
    short = [10, 11, 12, 13, 14, 15, 16, 17, 55, 14, 56, 99, 12, 13, 14]
    ctx = _context(short, shape, top_k=3)
    ctx.record(9, None, [[70, 71, 72]])
    tree = _drafter(ctx, branches=True).propose(ctx, 40)
    roots = {tree.tokens[i]: tree.sources[i] for i in tree.children[0].values()}
    assert roots == {15: Source.LEXICAL, 70: Source.BRANCH, 71: Source.BRANCH, 72: Source.BRANCH}
    assert tree.num_drafts == 13  # the whole chain, and the free rows recycled
    ctx = _context(short, FLAT, top_k=3)
    ctx.record(9, None, [[70, 71, 72]])
    tree = _drafter(ctx, branches=True).propose(ctx, 40)  # a pass that grows with its size:
    assert {tree.tokens[i] for i in tree.children[0].values()} == {15}  # a hit recycles nothing


def test_reference_chains_are_as_long_as_their_acceptance_pays():
    """A reference's chain (:class:`WithReference`): long while its tokens are accepted, as
    long as the budget on a flat cost, short once the answer has left it; the rate learns
    from each chain's outcome, apart for a followed reference and a fresh match."""
    from adapld_cli.engine.drafters.reference import WithReference

    cpu = StubCost(lambda n: 1.0 + 0.1 * (n - 1))  # each row a tenth of a step
    ctx = _context(BASE[:5], cpu)
    assert WithReference.length(ctx, 0.999, 128) == 128
    assert WithReference.length(ctx, 0.99, 128) >= 30
    assert 3 <= WithReference.length(ctx, 0.8, 128) <= 10
    assert WithReference.length(ctx, 0.1, 128) == 0  # a single step pays best
    assert WithReference.length(_context(BASE[:5], FLAT), 0.5, 40) == 40

    drafter = _drafter(ctx)
    ref = WithReference(drafter, [*BASE[:5], 77, 78, 79, *range(60, 100)])
    ref.start(ctx)
    tree = ref.propose(ctx, 100)  # the prior rate (0.9): a chain of a dozen or so
    chain = _chain(tree)
    assert chain[:3] == [77, 78, 79] and 5 <= len(chain) <= 30
    for _ in range(8):  # the answer leaves the reference at once, pass after pass
        ref.feedback(ctx, tree, [0], [1])
        ref._used, ref._chain, ref._aligned = 5, len(chain), False
    assert ref.rate(False) < 0.4 and ref.rate(True) == 0.9
    assert WithReference.length(ctx, ref.rate(False), 100) <= 2
