"""The transformers baselines: ``model.generate``, plain greedy or with prompt lookup.

Contract: :func:`run_generate` runs greedy ``generate`` (with
``prompt_lookup_num_tokens=prompt_lookup`` when given) with the same stop tokens, stop strings
and token limit as the engine, then truncates the output with the engine's own stop rule
(:class:`adapld_cli.engine.stops.StopChecker`), so it compares token for token with the other
methods. Statistics are filled in engine terms from forward hooks on the model:
``forward_passes`` = calls of the model (the first also runs the prompt), the tokens each pass
emitted (for ``accept_hist``) from the position of the next pass's first input token. This
module imports nothing else of the benchmark but its plain types.
"""

from __future__ import annotations

import time
from typing import Any

from adapld_cli.bench.types import MethodRun
from adapld_cli.engine.stops import StopChecker
from adapld_cli.engine.types import GenerationConfig, Stats


class _PassLog:
    """Forward hooks recording each pass's first input position, input size and the end of
    the first pass (which also ran the prompt)."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.sizes: list[int] = []
        self.first_end: float | None = None

    def pre(self, _mod: Any, _args: Any, kwargs: dict) -> None:
        pos = kwargs.get("position_ids")
        if pos is None:
            pos = kwargs.get("cache_position")
        self.starts.append(int(pos.reshape(-1)[0]) if pos is not None else -1)
        ids = kwargs.get("input_ids")
        self.sizes.append(int(ids.shape[-1]) if ids is not None else 0)

    def post(self, _mod: Any, _args: Any, _out: Any) -> None:
        if self.first_end is None:
            self.first_end = time.perf_counter()


def _special_ids(model: Any, tokenizer: Any, config: GenerationConfig) -> tuple[list[int], Any]:
    """``(eos ids, pad id)`` for ``generate``: the config's stop tokens, else the model's."""
    gen_cfg = getattr(model, "generation_config", None)
    eos = list(config.stop_token_ids)
    if not eos and getattr(gen_cfg, "eos_token_id", None) is not None:
        default = gen_cfg.eos_token_id
        eos = [default] if isinstance(default, int) else list(default)
    pad = getattr(gen_cfg, "pad_token_id", None)
    if pad is None:
        pad = getattr(tokenizer, "pad_token_id", None)
    if pad is None and eos:
        pad = eos[0]
    return eos, pad


def _generate_kwargs(
    model: Any, tokenizer: Any, config: GenerationConfig, prompt_lookup: int | None
) -> dict[str, Any]:
    """``generate`` keywords for greedy decoding under ``config`` (attention mask aside)."""
    eos, pad = _special_ids(model, tokenizer, config)
    kwargs: dict[str, Any] = dict(
        do_sample=False,
        temperature=None,
        top_p=None,
        top_k=None,
        max_new_tokens=config.max_new_tokens,
        eos_token_id=eos or None,
        pad_token_id=pad,
    )
    if prompt_lookup:
        kwargs["prompt_lookup_num_tokens"] = prompt_lookup
    if config.stop_strings:
        kwargs.update(stop_strings=list(config.stop_strings), tokenizer=tokenizer)
    return kwargs


def run_generate(
    model: Any,
    tokenizer: Any,
    prompt_ids: list[int],
    config: GenerationConfig,
    method: str,
    *,
    prompt_lookup: int | None = None,
) -> MethodRun:
    """Greedy ``model.generate`` from ``prompt_ids``; ``prompt_lookup`` = transformers'
    ``prompt_lookup_num_tokens`` (None: plain decoding). Stats are labelled ``method``."""
    import torch

    ids = torch.tensor([prompt_ids], device=getattr(model, "device", "cpu"))
    kwargs = _generate_kwargs(model, tokenizer, config, prompt_lookup)
    kwargs["attention_mask"] = torch.ones_like(ids)
    log = _PassLog()
    h1 = model.register_forward_pre_hook(log.pre, with_kwargs=True)
    h2 = model.register_forward_hook(log.post)
    try:
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(ids, **kwargs)
        wall = time.perf_counter() - t0
    finally:
        h1.remove()
        h2.remove()

    raw = out[0, len(prompt_ids) :].tolist()
    gen_cfg = getattr(model, "generation_config", None)
    stops = StopChecker(config, tokenizer, getattr(gen_cfg, "eos_token_id", None))
    keep, reason = stops.cut(raw, len(raw)) if raw else (0, None)
    tokens = raw[:keep]
    if reason is None:  # transformers stopped for a reason the engine does not know
        reason = "max_new_tokens" if len(tokens) >= config.max_new_tokens else "other"
    stats = _stats(method, log, len(prompt_ids), len(tokens), looked_up=bool(prompt_lookup))
    stats.prefill_s = (log.first_end - t0) if log.first_end is not None else 0.0
    stats.decode_s = max(0.0, wall - stats.prefill_s)
    return MethodRun(tokens, stats, reason, wall, extra={"raw_new_tokens": len(raw)})


def _stats(method: str, log: _PassLog, prompt_len: int, n_tokens: int, looked_up: bool) -> Stats:
    """Engine-style statistics from the pass log (drafts = input tokens beyond the first)."""
    stats = Stats(method=method, prompt_tokens=prompt_len, new_tokens=n_tokens)
    emitted = _emitted_per_pass(log.starts, prompt_len, n_tokens)
    stats.forward_passes = len(emitted)
    for n in emitted:
        stats.accept_hist[n] = stats.accept_hist.get(n, 0) + 1
    stats.accepted_draft_tokens = sum(n - 1 for n in emitted)
    stats.lexical_accepted = stats.accepted_draft_tokens
    if log.sizes and looked_up:  # the first pass also carries the prompt (all but its last)
        drafts = [log.sizes[0] - prompt_len, *(n - 1 for n in log.sizes[1:])]
        stats.drafted_tokens = sum(max(0, d) for d in drafts[: len(emitted)])
        stats.lexical_steps = sum(1 for d in drafts[: len(emitted)] if d > 0)
        stats.lexical_nohit_steps = len(emitted) - stats.lexical_steps
    return stats


def _emitted_per_pass(starts: list[int], prompt_len: int, n_tokens: int) -> list[int]:
    """Tokens each pass emitted (kept tokens only): pass ``i`` emits the tokens from its own
    pending position up to the next pass's first position. Passes after the stop are dropped."""
    if not starts or starts[0] < 0 or any(s < 0 for s in starts):
        return [n_tokens] if n_tokens else []
    pending = [prompt_len - 1, *starts[1:]]
    out: list[int] = []
    done = 0
    for i, p in enumerate(pending):
        nxt = pending[i + 1] if i + 1 < len(pending) else prompt_len - 1 + n_tokens
        n = min(nxt - p, n_tokens - done)
        if n <= 0:
            break
        out.append(n)
        done += n
    return out
