"""The decoding methods the benchmark compares, each run the same way on the same prompt.

Contract: :func:`parse_methods` turns ``"ar,hf,adapld"`` into validated names (raising
:class:`~adapld_cli.bench.tasks.BenchError`); :func:`run_method` generates greedily from a
prompt and returns a :class:`~adapld_cli.bench.types.MethodRun` whose ``tokens`` are truncated
by the engine's own stop rule (first stop token or stop string, that token kept; at most
``max_new_tokens``), so token lists of different methods compare directly.

Method names: the engine's (``ar``, ``pld``, ``adapld``) come from
:mod:`adapld_cli.engine.methods`; the benchmark adds, defined only here:

- ``hf``: transformers' ``model.generate``, plain greedy: what a user runs without adapld.
- ``hf-pld``: transformers' own prompt lookup, ``generate(prompt_lookup_num_tokens=10)``.
  Both run on the stock model (see :mod:`adapld_cli.bench.stock`); their forward passes are
  counted with hooks, and their first pass also runs the prompt (transformers has no separate
  prefill), so their ``prefill_s`` is that first pass.
- ``adapld-no-<component>``: adapld with one component switched off
  (:meth:`AdaPLDSettings.without`): semantic, branches, cursor, rerank, adaptive.
- ``adapld-semantic``: adapld with the semantic fallback forced on (its default is on for
  CUDA only, so on a CPU ``adapld`` already runs without it and this is the comparison).
- ``adapld-pass-topk``: adapld computing every pass's accepted rows' top-K
  (``pass_topk=True``; by default on CUDA only, a CPU looks them up on demand).
- ``ar-graphs`` / ``adapld-graphs``: ``ar`` / adapld with static verify passes, CUDA graphs
  on a GPU (``graphs=True``, :mod:`adapld_cli.engine.graphs`; the default on CUDA, so there
  they equal ``ar`` / ``adapld``, and on a CPU they run the static passes eagerly).
- ``ar-eager`` / ``adapld-eager``: the same with dynamic passes (``graphs=False``, the
  default on a CPU): on a GPU, what the graphs gain and whether they change an output.
- ``ar-buckets`` / ``adapld-buckets``: static passes of several sizes (``graphs=True``,
  ``uniform=False``): on a GPU, what one uniform shape with key planes (the CUDA default,
  what makes the passes exact there) costs against passes sized to the tree.
- ``adapld-chains``: adapld drafting single chains only (no branches, no semantic
  alternatives) through uniform passes without key planes: every row then lies on the
  tree's first-child chain, where a uniform pass was exact on a GPU without planes, so it
  skips their copies. Compared with ``ar`` side by side for speed; its ``= ar`` holds
  against ``ar`` without planes (``--set planes=false``), which on a GPU may round its one
  row otherwise than ``ar`` with planes.

Engine methods and ablations are lossless by construction: an output that differs from ``ar``
is a bug. The transformers baselines run other code (and possibly other kernels), so for them
a difference is reported but is not an adapld bug (see :data:`BASELINES`).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from adapld_cli.bench.hf import run_generate
from adapld_cli.bench.tasks import BenchError
from adapld_cli.bench.types import MethodRun
from adapld_cli.engine.methods import METHODS, Method
from adapld_cli.engine.settings import AdaPLDSettings
from adapld_cli.engine.types import GenerationConfig

HF_PLD_TOKENS = 10  # prompt_lookup_num_tokens of hf-pld, as a user would pass it
# transformers baselines: name -> prompt_lookup_num_tokens (None = plain greedy generate)
BASELINES: dict[str, int | None] = {"hf": None, "hf-pld": HF_PLD_TOKENS}
ABLATIONS = {
    "adapld-no-semantic": "semantic",
    "adapld-no-branches": "branches",
    "adapld-no-recycle": "recycle",
    "adapld-no-cursor": "cursor",
    "adapld-no-rerank": "rerank",
    "adapld-no-adaptive": "adaptive",
}
# variants switching on a component that is off by default on this device
VARIANTS: dict[str, dict[str, bool]] = {
    "adapld-semantic": {"semantic": True},
    "adapld-pass-topk": {"pass_topk": True},
    "adapld-graphs": {"graphs": True},
    "ar-graphs": {"graphs": True},
    "adapld-eager": {"graphs": False},
    "ar-eager": {"graphs": False},
    "adapld-buckets": {"graphs": True, "uniform": False},
    "ar-buckets": {"graphs": True, "uniform": False},
    "adapld-chains": {"planes": False, "semantic": False, "branches": False},
}
# the engine method a variant runs (default: adapld)
VARIANT_METHOD = {
    "ar-graphs": Method.ar.value,
    "ar-eager": Method.ar.value,
    "ar-buckets": Method.ar.value,
}
ALL_METHODS = (
    Method.ar.value, *BASELINES, Method.pld.value, Method.adapld.value, *ABLATIONS, *VARIANTS
)  # fmt: skip
DEFAULT_METHODS = (Method.ar.value, *BASELINES, Method.pld.value, Method.adapld.value)


def parse_methods(text: str | None) -> list[str]:
    """Validated method names in the given order (duplicates dropped; ``all`` = every one)."""
    if text is None or not text.strip():
        return list(DEFAULT_METHODS)
    names: list[str] = []
    for raw in text.split(","):
        name = raw.strip().lower()
        if not name:
            continue
        if name == "all":
            names.extend(ALL_METHODS)
            continue
        if name not in ALL_METHODS:
            raise BenchError(
                f"--methods: unknown method {name!r} (choose from {', '.join(ALL_METHODS)}, all)"
            )
        names.append(name)
    out = list(dict.fromkeys(names))
    if not out:
        raise BenchError("--methods: no method given")
    return out


def must_match_ar(name: str) -> bool:
    """Whether a difference from ``ar`` is a bug: true for the engine's methods and ablations."""
    return name not in BASELINES


def settings_for(name: str, base: AdaPLDSettings | None = None) -> AdaPLDSettings | None:
    """The AdaPLD settings a method runs with (``None`` for the transformers baselines). The
    engine's ``ar`` and ``pld`` take ``base`` too: their drafters ignore the drafting fields,
    the passes' (``graphs``, ``uniform``) apply to them as to adapld."""
    base = base or AdaPLDSettings()
    if name in (Method.adapld.value, Method.ar.value, Method.pld.value):
        return base
    if name in ABLATIONS:
        return base.without(ABLATIONS[name])
    if name in VARIANTS:
        return replace(base, **VARIANTS[name])
    return None


def run_method(
    name: str,
    model: Any,
    tokenizer: Any,
    prompt_ids: list[int],
    config: GenerationConfig,
    settings: AdaPLDSettings | None = None,
    workspaces: Any = None,
    prefix: Any = None,
    reference: list[int] | None = None,
) -> MethodRun:
    """Generate greedily from ``prompt_ids`` with method ``name``. For the transformers
    baselines pass the stock model (:class:`~adapld_cli.bench.stock.StockModel`).
    ``workspaces``: the engine's :class:`~adapld_cli.engine.Workspaces` kept between runs;
    ``prefix``: a :class:`~adapld_cli.engine.PrefixCache`; ``reference``: tokens the drafts
    copy from besides the prompt, as ``adapld edit`` gives a repair (adapld's engine methods
    only)."""
    if name in BASELINES:
        return run_generate(
            model, tokenizer, prompt_ids, config, name, prompt_lookup=BASELINES[name]
        )
    from adapld_cli.engine import generate  # imports torch: only when a benchmark runs

    engine_method = name
    if name in ABLATIONS or name in VARIANTS:
        engine_method = VARIANT_METHOD.get(name, Method.adapld.value)
    assert engine_method in METHODS, name
    t0 = time.perf_counter()
    result = generate(
        model,
        prompt_ids,
        config,
        engine_method,
        tokenizer=tokenizer,
        settings=settings_for(name, settings),
        workspaces=workspaces,
        prefix=prefix,
        reference=reference or (),
    )
    wall = time.perf_counter() - t0
    result.stats.method = name
    return MethodRun(result.tokens, result.stats, result.stop_reason, wall)
