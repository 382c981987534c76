"""The decoding methods the benchmark compares, each run the same way on the same prompt.

Contract: :func:`parse_methods` turns ``"ar,hf-pld,adapld"`` into validated names (raising
:class:`~adapld_cli.bench.tasks.BenchError`); :func:`run_method` generates greedily from a
prompt and returns a :class:`MethodRun` whose ``tokens`` are truncated by the engine's own stop
rule (first stop token or stop string, that token kept; at most ``max_new_tokens``), so token
lists of different methods compare directly.

Methods:
- ``ar``, ``pld``, ``adapld``: the engine (:func:`adapld_cli.engine.generate`).
- ``adapld-no-<component>``: adapld with one component switched off
  (:meth:`AdaPLDSettings.without`): semantic, branches, cursor, rerank, adaptive.
- ``hf-pld``: transformers' own prompt lookup, ``model.generate(prompt_lookup_num_tokens=10)``,
  the baseline a user would otherwise pick. Its forward passes are counted with hooks on the
  model; its first pass also runs the prompt (transformers has no separate prefill there), so
  its ``prefill_s`` is that first pass.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from adapld_cli.bench.tasks import BenchError
from adapld_cli.engine.settings import AdaPLDSettings
from adapld_cli.engine.types import GenerationConfig, Stats

ABLATIONS = {
    "adapld-no-semantic": "semantic",
    "adapld-no-branches": "branches",
    "adapld-no-cursor": "cursor",
    "adapld-no-rerank": "rerank",
    "adapld-no-adaptive": "adaptive",
}
ENGINE_METHODS = ("ar", "pld", "adapld")
ALL_METHODS = ("ar", "hf-pld", "pld", "adapld", *ABLATIONS)
DEFAULT_METHODS = ("ar", "hf-pld", "pld", "adapld")
HF_PLD_TOKENS = 10  # prompt_lookup_num_tokens, as a user would pass it


@dataclass
class MethodRun:
    """One generation: tokens (stop rule applied), engine-style stats, wall time."""

    tokens: list[int]
    stats: Stats
    stop_reason: str | None
    wall_s: float
    extra: dict[str, Any] = field(default_factory=dict)


def parse_methods(text: str | None) -> list[str]:
    """Validated method names in the given order (duplicates dropped)."""
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


def settings_for(name: str, base: AdaPLDSettings | None = None) -> AdaPLDSettings | None:
    """The AdaPLD settings a method runs with (``None`` for methods without settings)."""
    base = base or AdaPLDSettings()
    if name == "adapld":
        return base
    if name in ABLATIONS:
        return base.without(ABLATIONS[name])
    return None


def run_method(
    name: str,
    model: Any,
    tokenizer: Any,
    prompt_ids: list[int],
    config: GenerationConfig,
    settings: AdaPLDSettings | None = None,
) -> MethodRun:
    """Generate greedily from ``prompt_ids`` with method ``name``."""
    if name == "hf-pld":
        from adapld_cli.bench.hf import run_hf_pld

        return run_hf_pld(model, tokenizer, prompt_ids, config)
    from adapld_cli.engine import generate

    engine_method = "adapld" if name in ABLATIONS else name
    t0 = time.perf_counter()
    result = generate(
        model,
        prompt_ids,
        config,
        engine_method,
        tokenizer=tokenizer,
        settings=settings_for(name, settings),
    )
    wall = time.perf_counter() - t0
    result.stats.method = name
    return MethodRun(result.tokens, result.stats, result.stop_reason, wall)
