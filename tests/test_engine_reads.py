"""Device reads per decode pass: where a GPU's host-device syncs would be.

On a GPU every value the host reads from a tensor (``tolist``, ``item``, ``int(t)``, ...)
waits for the device. The loop's contract: a greedy pass reads once (the acceptance walk's
argmax, which brings the accepted rows' top-K with it); a step's drafting adds one read only
where it needs the model's numbers (the semantic fallback's similarities, the rerank's best
hit, an on-demand top-K lookup). Counted on a CPU with a torch function mode that sees every
such conversion, attributed to the engine function that made it.

Copies the other way wait too: ``torch.tensor(data, device="cuda")`` synchronizes the stream
after its copy. The engine's host data reaches the device only through
:func:`adapld_cli.engine.transfer.to_device` (pinned memory, queued), a static pass's inputs in
one such copy.
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


def _site(frame) -> str:
    """The innermost ``adapld_cli`` function at or above ``frame``; for ``to_device``,
    ``to_device:<its caller>``."""
    while frame is not None and "adapld_cli" not in frame.f_code.co_filename:
        frame = frame.f_back
    if frame is None:
        return "?"
    name = frame.f_code.co_name
    if name == "to_device":
        caller = frame.f_back
        name += f":{caller.f_code.co_name if caller else '?'}"
    return name


def _to_device(func, args, kwargs) -> bool:
    """Is this call a copy of host data onto a device (``torch.tensor(..., device=)``,
    ``Tensor.to(device)``, ``Tensor.cuda``)?"""
    if func is torch.tensor:
        return kwargs.get("device") is not None
    if func is torch.Tensor.cuda:
        return True
    if func is torch.Tensor.to:
        given = list(args[1:]) + [kwargs.get("device")]
        return any(isinstance(a, (str, torch.device)) for a in given)
    return False


class Reads(TorchFunctionMode):
    """Counts tensor-to-host reads (:attr:`sites`) and host-to-device copies (:attr:`copies`)
    by the innermost ``adapld_cli`` function making them."""

    def __init__(self) -> None:
        super().__init__()
        self.sites: Counter[str] = Counter()
        self.copies: Counter[str] = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in READS:
            self.sites[_site(sys._getframe(1))] += 1
        elif _to_device(func, args, kwargs):
            frame = sys._getframe(1)  # made by the engine itself (not inside the model's code)
            if "adapld_cli" in frame.f_code.co_filename:
                self.copies[_site(frame)] += 1
        return func(*args, **kwargs)


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
    _run.copies = reads.copies
    return tokens, event.stats, reads.sites


@pytest.mark.parametrize("passes", ["eager", "static", "uniform"])
def test_a_pass_reads_the_device_once(model, passes, monkeypatch):
    from adapld_cli.engine.logits import LazyLogits
    from adapld_cli.engine.runner import ModelRunner

    def one_block(self, last, n=None, topk=0):  # as on a GPU (a CPU's head runs 16-row blocks)
        return LazyLogits(self, last, max(1, len(last)), n, topk)

    monkeypatch.setattr(ModelRunner, "_lazy", one_block)
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


@pytest.mark.parametrize("passes", ["eager", "static", "uniform"])
def test_host_data_reaches_the_device_without_a_wait(model, passes, monkeypatch):
    """Every copy of host data onto the device goes through ``to_device`` (queued, no sync
    on a GPU); a static pass's inputs (ids, positions, slots, the tree) are one copy; the
    accepted rows go over only when a step accepted a branch (else they are the pass's
    first rows: the cache is cut, the record slices)."""
    from adapld_cli.engine.runner import ModelRunner

    keep, branched = ModelRunner.keep, []

    def counted(self, prefix_len, idx, rows=None):
        branched.append(idx != list(range(len(idx))))
        return keep(self, prefix_len, idx, rows)

    monkeypatch.setattr(ModelRunner, "keep", counted)
    extra = {"graphs": passes == "static", "uniform": passes == "uniform",
             "planes": passes == "uniform", "span": 64}  # fmt: skip
    tokens, stats, _ = _run(model, "adapld", AdaPLDSettings(**CUDA_LIKE, **extra))
    copies = _run.copies
    assert all(site.startswith("to_device:") for site in copies), copies
    if passes == "eager":
        assert copies["to_device:_run"] >= stats.forward_passes  # ids (and tree positions)
    else:
        assert copies["to_device:_stage"] == stats.forward_passes  # one copy a pass
        assert copies["to_device:_run"] == 1  # the prefill's one chunk only
    assert len(branched) == stats.forward_passes and sum(branched) < len(branched)
    assert copies["to_device:_decode"] == sum(branched), copies  # the accepted rows


def test_cpu_defaults_read_only_for_lookups(model):
    """CPU defaults: no pass top-K, no semantic fallback; beyond the walk's read, only the
    on-demand top-K lookups read (one each)."""
    ref, _, _ = _run(model, "ar", None)
    tokens, stats, sites = _run(model, "adapld", AdaPLDSettings(topk_lookup=True))
    assert tokens == ref and stats.accepted_draft_tokens > 20
    assert sites["argmax"] == stats.forward_passes
    assert sites["topk_rows"] >= 1 and set(sites) <= {"argmax", "topk_rows", "_choose"}, sites


class Writes(TorchFunctionMode):
    """Counts in-place writes (by function name) into the device buffers of the static passes
    :attr:`static` (the cache, kept key planes, every bucket's buffers) made while
    :attr:`on` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.on = False
        self.static = None
        self.writes: Counter[str] = Counter()

    def _buffers(self) -> set[int]:
        from dataclasses import fields

        from adapld_cli.engine.graphs import _Bucket

        static = self.static
        layers = [t for layer in static.layers for t in (layer._k, layer._v)]
        kept = [] if static.kept is None else static.kept.k + static.kept.v
        held = [getattr(b, f.name) for b in static._buckets.values() for f in fields(_Bucket)]
        tensors = [t for t in layers + kept + held if isinstance(t, torch.Tensor)]
        return {t.untyped_storage().data_ptr() for t in tensors}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        inplace = name == "__setitem__" or (name.endswith("_") and not name.startswith("_"))
        if self.on and inplace and isinstance(args[0], torch.Tensor):
            self.on = False  # (the check's own calls)
            if args[0].untyped_storage().data_ptr() in self._buffers():
                self.writes[name] += 1
            self.on = True
        return func(*args, **kwargs or {})


def test_a_static_pass_fills_its_buffers_inside_the_forward(model, monkeypatch):
    """On a GPU only what the forward does is in a captured graph, and everything else a
    pass launches costs the host a launch before the replay. Outside its forward a static
    pass writes one device buffer, once: its staged inputs (the one copy from the host);
    the masks, the key planes' indices and the planes themselves are filled inside it (the
    planes' catch-up of rows changed behind them aside: ``KeyPlanes.sync``, once a prompt
    here)."""
    from adapld_cli.engine.graphs import KeyPlanes, StaticPasses

    mode = Writes()
    run, inner, sync = StaticPasses.run, StaticPasses._run, KeyPlanes.sync
    passes = [0]

    def watch(self, *args, **kwargs):
        mode.static = self
        passes[0] += 1
        mode.on = True
        try:
            return run(self, *args, **kwargs)
        finally:
            mode.on = False

    def off(method):
        def call(self, *args, **kwargs):
            on, mode.on = mode.on, False
            try:
                return method(self, *args, **kwargs)
            finally:
                mode.on = on

        return call

    monkeypatch.setattr(StaticPasses, "run", watch)
    monkeypatch.setattr(StaticPasses, "_run", off(inner))
    monkeypatch.setattr(KeyPlanes, "sync", off(sync))
    settings = AdaPLDSettings(**CUDA_LIKE, uniform=True, planes=True, span=64)
    with one_thread(), mode:
        out = list(stream(model, _prompt(), GenerationConfig(max_new_tokens=80), "adapld",
                          settings=settings))  # fmt: skip
    stats = out[-1].stats
    assert stats.accepted_draft_tokens > 20 and passes[0] == stats.forward_passes
    assert mode.static.kept is not None and len(mode.static._buckets) > 1  # spans of 64
    # the one write outside the forward: the staged copy
    assert mode.writes == {"copy_": stats.forward_passes}, mode.writes
