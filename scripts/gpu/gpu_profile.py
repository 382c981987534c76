"""Where a decode pass's time goes: ``torch.profiler`` over plain steps and adapld passes of one
edit task (the GPU issue's item 1; not part of the package). Made for a lent GPU, where time
is scarce: one call prints everything, and writes it to ``--out`` as well::

    python scripts/gpu/gpu_profile.py --device cuda --out $OUT [--model M] [--task NAME]

For each mode of ``--modes`` (default ``graphs,eager``: static passes replayed as CUDA graphs,
``AdaPLDSettings.graphs``, the default on CUDA: one uniform shape with key planes there, then
dynamic eager passes; ``buckets``: static passes of the nine sizes; ``chains``: the
default's shapes without key planes, single-chain drafts) and each method
(``ar`` then ``adapld``): the prompt is prefilled and ``--warmup``
steps run unprofiled, then the next ``--steps`` (ar) or ``--passes`` (adapld) events are profiled
(CPU activities, and CUDA ones on a GPU). Printed: the wall time per event, the top entries by
self device time and by self CPU time, and the host-device synchronisations and copies per
event (``cudaStreamSynchronize``, ``cudaMemcpyAsync`` ...), and the host time per event of
each phase of a step (the engine's ``adapld.draft`` / ``verify`` / ``accept`` / ``record`` /
``feedback`` ranges, ``stream(profile_phases=True)``: on a GPU a phase's time includes its waits for
the device), and what an event is made of: device milliseconds and kernels per event by kind
(attention, products, copies, reductions, elementwise, other: :data:`KINDS`; the kernels of
replayed graphs included; a pass whose kernels are many and small is launch-bound even in a
graph, a few microseconds each). A Chrome trace of each goes to
``--out`` (open in Perfetto). The same script runs on a CPU (``tests/test_scripts.py``
runs it on a tiny model), so it is ready before a device is lent.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

SYNC_OPS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpyAsync", "cudaMemcpy")
# what a pass is made of: kernel (or, on a CPU, aten op) names by kind, the first match wins
KINDS = (
    ("attention", re.compile(r"fmha|flash|attention|cudnn|sdpa|softmax")),
    (
        "products",
        re.compile(r"gemm|gemv|cutlass|cublas|xmma|nvjet|matmul|aten::(mm|addmm|bmm|linear)$"),
    ),
    (
        "copies",
        re.compile(r"memcpy|memset|index|gather|scatter|copy|cat_|aten::(cat|where|clone)$"),
    ),
    ("reductions", re.compile(r"reduce|norm|argmax|topk|sort|mean|aten::(sum|max)$")),
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled|pointwise|aten::")),
)
# --modes: the settings each runs with (AdaPLDSettings fields), and the suffix of its name
MODES = {"graphs": {"graphs": True}, "buckets": {"graphs": True, "uniform": False},
         "chains": {"graphs": True, "planes": False, "semantic": False, "branches": False},
         "eager": {"graphs": False}}  # fmt: skip
MODE_SUFFIX = {"graphs": "-graphs", "buckets": "-buckets", "chains": "-chains", "eager": ""}


def mode_of(settings: Any, device_type: str) -> str:
    """The ``--modes`` name of ``settings``' passes on this device: eager, static of the
    default's shapes (``graphs``), static of the nine sizes (``buckets``) or the default's
    shapes without key planes for single-chain drafts (``chains``, the bench's
    ``adapld-chains``)."""
    if not settings.static_passes(device_type):
        return "eager"
    if settings.uniform is False:
        return "buckets"
    chains = settings.planes is False and not settings.branches and settings.semantic is False
    return "chains" if chains else "graphs"


def profile_method(
    model: Any,
    prompt: list[int],
    method: str,
    events: int,
    *,
    warmup: int = 5,
    tokenizer: Any = None,
    stop_strings: tuple[str, ...] = (),
    trace: Path | None = None,
    rows: int = 25,
    settings: Any = None,
) -> dict[str, Any]:
    """Profile ``events`` decode events of ``method`` after ``warmup`` unprofiled ones; returns
    ``{"method", "events", "tokens", "event_ms" (median), "device_table", "cpu_table",
    "syncs_per_event", "phase_ms"}`` (the tables as text; ``phase_ms``: phase -> host
    milliseconds per event)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from adapld_cli.engine import AdaPLDSettings, GenerationConfig, stream

    cuda = next(model.parameters()).device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    config = GenerationConfig(max_new_tokens=4096, stop_strings=stop_strings)
    gen = stream(
        model, prompt, config, method, tokenizer=tokenizer, settings=settings,
        profile_phases=True,
    )  # fmt: skip
    times: list[float] = []
    tokens = 0
    try:
        done = False
        for _ in range(warmup):
            if next(gen).finished:
                done = True
                break
        with profile(activities=activities) as prof:
            for _ in range(events if not done else 0):
                t0 = time.perf_counter()
                event = next(gen)
                if cuda:
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
                tokens += len(event.tokens)
                if event.finished:
                    break
    finally:
        gen.close()
    n = max(len(times), 1)
    averages = prof.key_averages()
    syncs = {e.key: e.count / n for e in averages if e.key in SYNC_OPS}
    phases = {
        e.key.removeprefix("adapld."): round(e.cpu_time_total / n / 1e3, 3)
        for e in averages
        if e.key.startswith("adapld.")
    }
    device_key = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    mix = kernel_mix(averages, cuda, n)
    if trace is not None and times:
        prof.export_chrome_trace(str(trace))
    return {
        "method": method
        + MODE_SUFFIX[mode_of(settings or AdaPLDSettings(), "cuda" if cuda else "cpu")],
        "events": len(times),
        "tokens": tokens,
        "event_ms": statistics.median(times) * 1e3 if times else 0.0,
        "device_table": averages.table(sort_by=device_key, row_limit=rows),
        "cpu_table": averages.table(sort_by="self_cpu_time_total", row_limit=rows),
        "syncs_per_event": syncs,
        "phase_ms": phases,
        "kernel_mix": mix,
    }


def kind(name: str) -> str:
    """The kind of a kernel (or aten op) by its name (:data:`KINDS`), else ``other``."""
    low = name.lower()
    return next((k for k, pattern in KINDS if pattern.search(low)), "other")


def kernel_mix(averages: Any, cuda: bool, events: int) -> dict[str, dict[str, float]]:
    """Per kind of kernel: device milliseconds and kernels per event (on a GPU the entries
    with device time of their own, i.e. the kernels and copies, captured graphs' included;
    on a CPU the leaf aten ops by self CPU time), and ``all``."""
    mix: dict[str, dict[str, float]] = {}
    for e in averages:
        us = e.self_device_time_total if cuda else e.self_cpu_time_total
        leaf = cuda or (e.key.startswith("aten::") and e.self_cpu_time_total > 0)
        if (
            us <= 0
            or not leaf
            or e.key.startswith("adapld.")
            or (cuda and e.key.startswith("aten::"))
        ):
            continue
        for k in (kind(e.key), "all"):
            row = mix.setdefault(k, {"ms": 0.0, "kernels": 0.0})
            row["ms"] += us / 1e3 / events
            row["kernels"] += e.count / events
    return {k: {f: round(v, 3) for f, v in row.items()} for k, row in mix.items()}


def report(result: dict[str, Any]) -> str:
    """The printed form of one :func:`profile_method` result."""
    head = (
        f"== {result['method']}: {result['events']} events, {result['tokens']} tokens, "
        f"median {result['event_ms']:.2f} ms an event; host-device syncs and copies per "
        f"event: {json.dumps(result['syncs_per_event'])}; host ms per event by phase: "
        f"{json.dumps(result['phase_ms'])}; device ms and kernels per event by kind: "
        f"{json.dumps(result['kernel_mix'])}"
    )
    return "\n".join(
        [head, "-- by self device time", result["device_table"], "-- by self CPU time",
         result["cpu_table"]]
    )  # fmt: skip


def case_prompt(model: str | None, device: str, task: str) -> tuple[Any, Any]:
    """The loaded model and the prompt ``adapld edit`` builds for the edit case ``task``."""
    from adapld_cli.bench.tasks import load_tasks
    from adapld_cli.edit.prompt import build_prompt, load_template
    from adapld_cli.model import load

    cases = Path(__file__).resolve().parents[2] / "adapld_cli" / "bench" / "edit_cases.jsonl"
    case = load_tasks(cases, names=[task])[0]
    loaded = load(model, device=device)
    prompt = build_prompt(
        load_template(None),
        loaded.tokenizer,
        code=case.before,
        instruction=case.instruction,
        filename=case.filename,
        lang="python",
    )
    return loaded, prompt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="as adapld's --model (default: embedded)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--task", default="2_rename_method_sched", help="an edit case's name")
    parser.add_argument("--steps", type=int, default=50, help="ar steps profiled")
    parser.add_argument("--passes", type=int, default=20, help="adapld passes profiled")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="folder for the report + traces")
    parser.add_argument(
        "--modes",
        default="graphs,eager",
        help="graphs (static passes, the default's shapes), buckets (nine sizes), eager",
    )
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or set(modes) - set(MODES):
        parser.error(f"--modes: of {', '.join(MODES)}")

    from adapld_cli.engine import AdaPLDSettings

    loaded, prompt = case_prompt(args.model, args.device, args.task)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
    texts = []
    runs = [
        (method, events, AdaPLDSettings(**MODES[mode]))
        for mode in modes
        for method, events in (("ar", args.steps), ("adapld", args.passes))
    ]
    device_type = next(loaded.model.parameters()).device.type
    for method, events, settings in runs:
        name = method + MODE_SUFFIX[mode_of(settings, device_type)]
        trace = None if args.out is None else args.out / f"trace_{name}.json"
        result = profile_method(
            loaded.model,
            prompt.ids,
            method,
            events,
            warmup=args.warmup,
            tokenizer=loaded.tokenizer,
            stop_strings=(prompt.stop_string,),
            trace=trace,
            settings=settings,
        )
        texts.append(report(result))
        print(texts[-1], flush=True)
    if args.out is not None:
        (args.out / "profile.txt").write_text("\n\n".join(texts) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
