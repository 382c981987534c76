"""The ``hf-pld`` baseline: transformers' ``generate(prompt_lookup_num_tokens=10)``.

Contract: :func:`run_hf_pld` runs greedy prompt-lookup generation with the same stop tokens,
stop strings and token limit as the engine, then truncates the output with the engine's own
stop rule (:class:`adapld_cli.engine.stops.StopChecker`), so it compares token for token with
the other methods. Statistics are filled in engine terms from forward hooks on the model:
``forward_passes`` = calls of the model (the first also runs the prompt), the tokens each pass
emitted (for ``accept_hist``) from the position of the next pass's first input token.
"""

from __future__ import annotations

import time
from typing import Any

from adapld_cli.engine.stops import StopChecker
from adapld_cli.engine.types import GenerationConfig, Stats


def run_hf_pld(
    model: Any,
    tokenizer: Any,
    prompt_ids: list[int],
    config: GenerationConfig,
    num_tokens: int = 10,
) -> Any:
    import torch

    from adapld_cli.bench.methods import MethodRun

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

    starts: list[int] = []  # first position of each pass's input
    sizes: list[int] = []  # input tokens of each pass
    marks: list[float] = []  # end time of the first pass

    def pre(_mod: Any, args: Any, kwargs: dict) -> None:
        pos = kwargs.get("position_ids")
        if pos is None:
            pos = kwargs.get("cache_position")
        starts.append(int(pos.reshape(-1)[0]) if pos is not None else -1)
        ids = kwargs.get("input_ids")
        sizes.append(int(ids.shape[-1]) if ids is not None else 0)

    def post(_mod: Any, _args: Any, _out: Any) -> None:
        if not marks:
            marks.append(time.perf_counter())

    device = getattr(model, "device", "cpu")
    ids = torch.tensor([prompt_ids], device=device)
    kwargs: dict[str, Any] = dict(
        attention_mask=torch.ones_like(ids),
        do_sample=False,
        temperature=None,
        top_p=None,
        top_k=None,
        prompt_lookup_num_tokens=num_tokens,
        max_new_tokens=config.max_new_tokens,
        eos_token_id=eos or None,
        pad_token_id=pad,
    )
    if config.stop_strings:
        kwargs.update(stop_strings=list(config.stop_strings), tokenizer=tokenizer)
    h1 = model.register_forward_pre_hook(pre, with_kwargs=True)
    h2 = model.register_forward_hook(post)
    try:
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(ids, **kwargs)
        wall = time.perf_counter() - t0
    finally:
        h1.remove()
        h2.remove()

    raw = out[0, len(prompt_ids) :].tolist()
    stops = StopChecker(config, tokenizer, getattr(gen_cfg, "eos_token_id", None))
    keep, reason = stops.cut(raw, len(raw)) if raw else (0, None)
    tokens = raw[:keep]
    if reason is None:  # transformers stopped for a reason the engine does not know
        reason = "max_new_tokens" if len(tokens) >= config.max_new_tokens else "other"

    stats = Stats(method="hf-pld", prompt_tokens=len(prompt_ids))
    stats.new_tokens = len(tokens)
    emitted = _emitted_per_pass(starts, len(prompt_ids), len(tokens))
    stats.forward_passes = len(emitted)
    for n in emitted:
        stats.accept_hist[n] = stats.accept_hist.get(n, 0) + 1
    stats.accepted_draft_tokens = sum(n - 1 for n in emitted)
    if sizes:  # the first pass also carries the prompt (all but its last token)
        drafts = [sizes[0] - len(prompt_ids), *(n - 1 for n in sizes[1:])]
        stats.drafted_tokens = sum(max(0, d) for d in drafts[: len(emitted)])
        stats.lexical_steps = sum(1 for d in drafts[: len(emitted)] if d > 0)
        stats.lexical_nohit_steps = len(emitted) - stats.lexical_steps
    stats.lexical_accepted = stats.accepted_draft_tokens
    stats.prefill_s = (marks[0] - t0) if marks else 0.0
    stats.decode_s = max(0.0, wall - stats.prefill_s)
    return MethodRun(tokens, stats, reason, wall, extra={"raw_new_tokens": len(raw)})


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
