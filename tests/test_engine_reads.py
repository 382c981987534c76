"""Device reads per decode pass: where a GPU's host-device syncs would be.

On a GPU every value the host reads from a tensor (``tolist``, ``item``, ``int(t)``, ...)
waits for the device. The loop's contract: a greedy pass reads once (the acceptance walk's
argmax, which brings the accepted rows' top-K with it); a step's drafting adds one read only
where it needs the model's numbers (the semantic fallback's similarities, the rerank's best
hit, an on-demand top-K lookup). Counted on a CPU with a torch function mode that sees every
such conversion, attributed to the engine function that made it.
"""

from __future__ import annotations

import sys
from collections import Counter

import pytest
import torch
from torch.overrides import TorchFunctionMode

from adapld_cli.engine import AdaPLDSettings, GenerationConfig, stream
from tests.tiny_models import one_thread, tiny_model

READS = {
    torch.Tensor.tolist,
    torch.Tensor.item,
    torch.Tensor.__bool__,
    torch.Tensor.__int__,
    torch.Tensor.__float__,
    torch.Tensor.__index__,
    torch.Tensor.numpy,
    torch.Tensor.cpu,
}

# the CUDA defaults (AdaPLDSettings: None means on for CUDA), forced on a CPU
CUDA_LIKE = {"prompt_topk": True, "pass_topk": True, "semantic": True}


class Reads(TorchFunctionMode):
    """Counts tensor-to-host reads by the innermost ``adapld_cli`` function making them."""

    def __init__(self) -> None:
        super().__init__()
        self.sites: Counter[str] = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in READS:
            frame = sys._getframe(1)
            while frame is not None and "adapld_cli" not in frame.f_code.co_filename:
                frame = frame.f_back
            self.sites[frame.f_code.co_name if frame else "?"] += 1
        return func(*args, **(kwargs or {}))


@pytest.fixture(scope="module")
def model():
    return tiny_model("qwen2", dtype="float32", hidden=64, vocab=300)


def _prompt() -> list[int]:
    import random

    rng = random.Random(1)
    base = [rng.randrange(300) for _ in range(120)]
    return base + base[:60]  # copy-heavy, with stretches where nothing matches


def _run(model, method: str, settings: AdaPLDSettings | None):
    reads = Reads()
    tokens: list[int] = []
    with one_thread(), reads:
        for event in stream(model, _prompt(), GenerationConfig(max_new_tokens=80), method,
                            settings=settings):  # fmt: skip
            tokens += event.tokens
    return tokens, event.stats, reads.sites


@pytest.mark.parametrize("passes", ["eager", "static", "uniform"])
def test_a_pass_reads_the_device_once(model, passes):
    ref, ar_stats, ar_sites = _run(model, "ar", None)
    assert ar_sites == {"argmax": ar_stats.forward_passes}  # one read a step, nothing else
    extra = {"graphs": passes == "static", "uniform": passes == "uniform"}
    tokens, stats, sites = _run(model, "adapld", AdaPLDSettings(**CUDA_LIKE, **extra))
    assert tokens == ref
    # teeth: copied drafts accepted, semantic steps drafted, lexical steps taken
    assert stats.accepted_draft_tokens > 20 and stats.semantic_steps > 0
    assert stats.lexical_steps > 0
    assert sites["argmax"] == stats.forward_passes  # the walk's read, top-K rows included
    assert sites["record"] == 1  # the prefill's top-K rows, read once
    assert 0 < sites["_semantic"] <= stats.lexical_nohit_steps  # one read a fallback step
    assert sites["_choose"] <= stats.lexical_steps  # the rerank's best hit
    assert set(sites) <= {"argmax", "record", "_semantic", "_choose"}, sites


def test_cpu_defaults_read_only_for_lookups(model):
    """CPU defaults: no pass top-K, no semantic fallback; beyond the walk's read, only the
    on-demand top-K lookups read (one each)."""
    ref, _, _ = _run(model, "ar", None)
    tokens, stats, sites = _run(model, "adapld", AdaPLDSettings(topk_lookup=True))
    assert tokens == ref and stats.accepted_draft_tokens > 20
    assert sites["argmax"] == stats.forward_passes
    assert sites["topk_rows"] >= 1 and set(sites) <= {"argmax", "topk_rows", "_choose"}, sites
