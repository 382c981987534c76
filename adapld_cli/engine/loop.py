"""The decode loop: prefill, then draft -> verify -> accept -> compact, one event per step.

:func:`stream` is a generator of :class:`StepEvent`; :func:`generate` drains it. The loop
knows nothing of files, prompts or terminals, nor where drafts come from: a
:class:`~adapld_cli.engine.drafters.Drafter` proposes a tree rooted at the pending token, the
model verifies every node in one forward pass (tree attention), and the accepted path plus
the model's own next token are emitted. Greedy output is token-for-token that of plain
greedy decoding; seeded sampling draws exactly as plain seeded sampling does.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from typing import Any

import torch

from adapld_cli.engine.context import Context
from adapld_cli.engine.cost import CostModel
from adapld_cli.engine.drafters import Drafter, make_drafter
from adapld_cli.engine.drafters.reference import WithReference
from adapld_cli.engine.graphs import BUCKETS, uniform_shape
from adapld_cli.engine.prefix import PrefixCache
from adapld_cli.engine.runner import ModelRunner
from adapld_cli.engine.sampling import TokenChooser
from adapld_cli.engine.settings import AdaPLDSettings
from adapld_cli.engine.stops import StopChecker
from adapld_cli.engine.transfer import to_device
from adapld_cli.engine.tree import DraftTree, accept
from adapld_cli.engine.types import GenerationConfig, GenerationResult, Source, Stats, StepEvent
from adapld_cli.engine.workspaces import Workspaces


def stream(
    model: Any,
    prompt_ids: Sequence[int],
    config: GenerationConfig | None = None,
    method: str | Drafter = "adapld",
    *,
    tokenizer: Any = None,
    settings: AdaPLDSettings | None = None,
    reference: Sequence[int] = (),
    prefix: PrefixCache | None = None,
    workspaces: Workspaces | None = None,
    profile_phases: bool = False,
) -> Iterator[StepEvent]:
    """Generate from ``prompt_ids`` with ``method``, yielding one event per decode step.

    ``config.stop_token_ids`` defaults to the model's ``generation_config.eos_token_id``;
    ``config.stop_strings`` need ``tokenizer``. The last event has ``finished=True``.
    ``settings`` (default: the defaults) are settled for the model's device here, once
    (:meth:`AdaPLDSettings.resolve`); their pass fields (``graphs``, ``uniform``,
    ``planes``, ``span``) apply to every method: verify passes run as static passes (CUDA
    graphs on a GPU, :mod:`adapld_cli.engine.graphs`; ``stats.graph_passes`` counts the
    replays), with ``uniform`` all of one shape. ``reference``: token ids of a predicted
    output to draft from as well (:class:`~adapld_cli.engine.drafters.reference.
    WithReference`; never with ``ar``, whose passes stay single-token).

    State kept between generations one after the other, each optional (none given: nothing
    is kept): ``prefix``, a :class:`~adapld_cli.engine.prefix.PrefixCache` (the prefill
    chunks a previous prompt shares are taken over, bit for bit; ``stats.cached_tokens``
    counts them); ``workspaces``, a :class:`~adapld_cli.engine.workspaces.Workspaces`
    (static passes take over a previous generation's cache and captured graphs).
    ``profile_phases``: each step's phases run inside ``torch.profiler`` ranges named
    ``adapld.draft``, ``.verify``, ``.accept``, ``.record`` and ``.feedback`` (for
    profiling scripts; off, they cost nothing).
    """
    config = config or GenerationConfig()
    if not prompt_ids:
        raise ValueError("empty prompt")
    if config.max_new_tokens < 1:
        raise ValueError("max_new_tokens must be >= 1")
    device_type = next(model.parameters()).device.type
    settings = (settings or AdaPLDSettings()).resolve(device_type)
    drafter = make_drafter(method, settings)
    if reference and drafter.name != "ar":
        drafter = WithReference(drafter, reference)
    gen_cfg = getattr(model, "generation_config", None)
    stops = StopChecker(config, tokenizer, getattr(gen_cfg, "eos_token_id", None))
    runner = ModelRunner(
        model,
        hidden_layer=drafter.hidden_layer,
        want_hidden=drafter.wants_hidden,
        keep_final=drafter.wants_topk > 0,  # top-K rows on demand (ar and pld never ask)
        workspaces=workspaces,
        **_passes(len(prompt_ids), config, settings),
    )
    try:
        yield from _decode(runner, list(prompt_ids), config, drafter, stops, prefix, profile_phases)
    finally:
        runner.close()


def generate(
    model: Any,
    prompt_ids: Sequence[int],
    config: GenerationConfig | None = None,
    method: str | Drafter = "adapld",
    *,
    tokenizer: Any = None,
    settings: AdaPLDSettings | None = None,
    reference: Sequence[int] = (),
    prefix: PrefixCache | None = None,
    workspaces: Workspaces | None = None,
) -> GenerationResult:
    """Run :func:`stream` to the end; returns the generated tokens and statistics."""
    tokens: list[int] = []
    event = None
    events = stream(
        model,
        prompt_ids,
        config,
        method,
        tokenizer=tokenizer,
        settings=settings,
        reference=reference,
        prefix=prefix,
        workspaces=workspaces,
    )
    for event in events:
        tokens.extend(event.tokens)
    return GenerationResult(tokens=tokens, stats=event.stats, stop_reason=event.stop_reason)


def _passes(prompt_len: int, config: GenerationConfig, settings: AdaPLDSettings) -> dict[str, Any]:
    """The runner's pass arguments from resolved ``settings``: its cache capacity (the
    prompt, the answer and one pass's nodes; a budget beyond 4,096 new tokens grows it by
    doubling when reached, except with ``uniform``, which preallocates it all: its width is
    a shape the kernels see), whether its passes are static, their shapes, key planes and
    key span."""
    shapes = (uniform_shape(settings.node_budget),) if settings.uniform else BUCKETS
    answer = config.max_new_tokens if settings.uniform else min(config.max_new_tokens, 4096)
    return {
        "capacity": prompt_len + answer + max(128, shapes[-1]),
        "static": settings.graphs,
        "shapes": shapes,
        "planes": settings.planes,
        "span": settings.span,
    }


def _phase(name: str, profile: bool) -> Any:
    """The profiler range ``adapld.<name>`` of one phase of a step with ``profile``, else a
    no-op."""
    return torch.profiler.record_function(f"adapld.{name}") if profile else nullcontext()


def _decode(
    runner: ModelRunner,
    prompt: list[int],
    config: GenerationConfig,
    drafter: Drafter,
    stops: StopChecker,
    prefix: PrefixCache | None = None,
    profile: bool = False,
) -> Iterator[StepEvent]:
    stats = Stats(method=drafter.name, prompt_tokens=len(prompt))
    chooser = TokenChooser(config)
    hidden_size = runner.model.config.hidden_size if drafter.wants_hidden else 0
    top_k = drafter.wants_topk
    ctx = Context(
        prompt,
        len(prompt) + config.max_new_tokens + 1,
        hidden_size,
        top_k,
        runner.device,
        CostModel(runner.device.type, flat=runner.flat_rows),
    )
    t0 = time.perf_counter()
    prompt_topk = drafter.prompt_topk
    pass_topk = top_k if drafter.pass_topk else 0
    # the last prompt token is the first step's root
    hidden, topk = runner.prefill(prompt[:-1], top_k if prompt_topk else 0, prefix=prefix)
    stats.cached_tokens = runner.reused
    ctx.record(0, hidden, topk)
    if top_k and not prompt_topk:
        ctx.observed_topk(len(prompt) - 1)
    if top_k:
        ctx.attach(runner)  # missing top-K rows on demand, from cached final hidden states
    drafter.start(ctx)
    stats.prefill_s = time.perf_counter() - t0

    while True:
        t_step = time.perf_counter()
        remaining = config.max_new_tokens - len(ctx.tokens) + ctx.prompt_len
        with _phase("draft", profile):
            tree = drafter.propose(ctx, remaining - 1)
        root_pos = ctx.pending  # == runner.cache_len
        chain = tree.is_chain
        firsts = runner.first_passes
        t_pass = time.perf_counter()
        with _phase("verify", profile):
            out = runner.verify(
                tree.tokens,
                None if chain else tree.parents,
                None if chain else tree.depths,
                pass_topk,  # read with the argmax (on a GPU: one sync a pass)
            )
        with _phase("accept", profile):
            path, bonus = accept(tree, chooser.bind(out.logits))
        pass_s = time.perf_counter() - t_pass
        if runner.first_passes == firsts:  # a first pass's capture is no pass's cost
            ctx.cost.observe(len(tree), pass_s)
        stats.pass_s += pass_s

        with _phase("record", profile):
            hidden = out.hidden
            if path == list(range(len(path))):  # the pass's first rows: the cache is cut
                runner.keep(root_pos, path)
                hidden = None if hidden is None else hidden[: len(path)]
            else:  # a branch: one copy, shared by the cache's compaction and the record
                rows = to_device(path, runner.device)
                runner.keep(root_pos, path, rows)
                hidden = None if hidden is None else hidden.index_select(0, rows)
            ctx.record(root_pos, hidden, out.logits.topk(path, pass_topk) if pass_topk else None)
        new = [tree.tokens[i] for i in path[1:]] + [bonus]
        sources = [tree.sources[i] for i in path[1:]] + [Source.MODEL]
        ctx.tokens.extend(new)
        if top_k and not pass_topk:  # the tokens that followed stand in (see AdaPLDSettings)
            ctx.observed_topk(root_pos + len(path), start=root_pos)
        keep, reason = stops.cut(ctx.generated, len(new))
        if keep < len(new):
            del ctx.tokens[len(ctx.tokens) - len(new) + keep :]
            new, sources = new[:keep], sources[:keep]
        if reason is None:
            with _phase("feedback", profile):
                drafter.feedback(ctx, tree, path, new)

        _count(stats, tree, new, sources)
        if runner.static is not None:
            stats.graph_passes = runner.graph_replays
            stats.graph_fallback = runner.static.fallback
        stats.ar_step_s = ctx.cost.step_s
        stats.decode_s += time.perf_counter() - t_step
        if reason is not None and prefix is not None:  # before the caller sees the end
            runner.remember(prefix, ctx.tokens)
        yield StepEvent(new, sources, stats, finished=reason is not None, stop_reason=reason)
        if reason is not None:
            return


def _count(stats: Stats, tree: DraftTree, new: list[int], sources: list[Source]) -> None:
    """Add one decode step to ``stats``: ``new`` = emitted tokens, ``sources`` = their origins."""
    stats.forward_passes += 1
    stats.new_tokens += len(new)
    stats.accept_hist[len(new)] = stats.accept_hist.get(len(new), 0) + 1
    stats.drafted_tokens += tree.num_drafts
    if tree.kind == "lexical":
        stats.lexical_steps += 1
    elif tree.looked_up:
        stats.lexical_nohit_steps += 1
    if Source.SEMANTIC in tree.sources:
        stats.semantic_steps += 1
    if any(src is Source.BRANCH for src in tree.sources):
        stats.branch_steps += 1
    for src in sources:
        if src is Source.LEXICAL:
            stats.lexical_accepted += 1
        elif src is Source.SEMANTIC:
            stats.semantic_accepted += 1
        elif src is Source.BRANCH:
            stats.branch_accepted += 1
    stats.accepted_draft_tokens += sum(1 for s in sources if s is not Source.MODEL)
