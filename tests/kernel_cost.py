"""Per-n forward cost of the embedded model under each kernel setting, in one process.

Not a test (pytest does not collect it): a measurement script for the README's cost curve.
Loads the embedded model once (stock float32), makes one copy per setting, fills each copy's
KV cache with the same ``--context`` random tokens, then times whole-model forwards (LM head
over every row) over ``n`` new random tokens, rotating through the settings and sizes in every
round so that load from other processes hits them alike; prints per-setting median
milliseconds and the ratio to stock float32 n = 1.

    python -m tests.kernel_cost [--context 1000] [--rounds 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

SIZES = (1, 2, 4, 8, 16, 32, 64)


def _variants(base):
    import torch

    from adapld_cli.model import kernels

    yield "stock fp32", base
    for label, dtype, mode in (
        ("packed fp32", torch.float32, "packed"),
        ("exact fp32", torch.float32, "exact"),
        ("packed bf16", torch.bfloat16, "packed"),
        ("exact bf16", torch.bfloat16, "exact"),
    ):
        model = copy.deepcopy(base).to(dtype)
        model.adapld_kernels = "stock"
        kernels.apply(model, mode)
        yield label, model


def main() -> None:
    import torch
    from transformers import DynamicCache

    from adapld_cli.model import load
    from adapld_cli.model.placement import set_threads

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--context", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    threads = set_threads(args.threads)
    base = load(device="cpu", dtype="float32", progress=False)
    if base.model.adapld_kernels != "stock":
        raise SystemExit("run with ADAPLD_KERNELS=stock: the base model must be stock")
    gen = torch.Generator().manual_seed(0)
    ctx = torch.randint(0, 20000, (1, args.context), generator=gen)
    ids = {n: torch.randint(0, 20000, (1, n), generator=gen) for n in SIZES}
    models, caches = {}, {}
    with torch.inference_mode():
        for label, model in _variants(base.model):
            models[label], caches[label] = model, DynamicCache(config=model.config)
            model(ctx, cache=caches[label], use_cache=True)
        times: dict[str, dict[int, list[float]]] = {k: {n: [] for n in SIZES} for k in models}
        for _ in range(args.rounds + 1):  # round 0 warms up
            for n in SIZES:
                for label, model in models.items():
                    t0 = time.perf_counter()
                    model(ids[n], cache=caches[label], use_cache=True)
                    times[label][n].append(time.perf_counter() - t0)
                    caches[label].crop(-n)
    med = {k: {n: statistics.median(v[1:]) * 1e3 for n, v in d.items()} for k, d in times.items()}
    step = med["stock fp32"][1]
    print(f"threads={threads} context={args.context} rounds={args.rounds} (median ms, x stock n=1)")
    print("   n  " + "".join(f"{k:>20}" for k in med))
    for n in SIZES:
        print(f"{n:4d}  " + "".join(f"{med[k][n]:>11.1f} ({med[k][n] / step:4.2f})" for k in med))


if __name__ == "__main__":
    main()
