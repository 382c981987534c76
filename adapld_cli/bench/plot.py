"""PNG plot of a benchmark document (matplotlib, Agg backend, imported only here).

Contract: :func:`write_plot` draws two panels into ``path``: left, the end-to-end speedup over
``ar`` per task for each method (grouped bars, log scale, a line at 1x); right, the distribution
of tokens emitted per decode pass (``accept_hist``) for each method, as the cumulative share of
generated tokens that came from passes emitting at most k tokens. Raises
:class:`~adapld_cli.bench.tasks.BenchError` when matplotlib is missing
(``pip install 'adapld[bench]'``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adapld_cli.bench.tasks import BenchError


def write_plot(doc: dict[str, Any], path: str | Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
    except ImportError:
        raise BenchError("--plot needs matplotlib: pip install 'adapld[bench]'") from None

    methods = [m for m in doc["methods"] if m != "ar"]
    tasks = list(dict.fromkeys(r["task"] for r in doc["tasks"]))
    speed = {(r["task"], r["method"]): r["speedup_vs_ar"] for r in doc["tasks"]}
    fig, (ax1, ax2) = plt.subplots(
        1,
        2,
        figsize=(max(10.0, 4 + 0.45 * len(tasks) * max(1, len(methods)) / 2), 5),
        gridspec_kw={"width_ratios": [2, 1]},
    )
    width = 0.8 / max(1, len(methods))
    for i, m in enumerate(methods):
        xs = [t + (i - (len(methods) - 1) / 2) * width for t in range(len(tasks))]
        ys = [speed.get((task, m)) or 0.0 for task in tasks]
        geo = doc["methods"][m].get("speedup_vs_ar")
        label = f"{m} (geo {geo:.2f}x)" if geo else m
        ax1.bar(xs, ys, width=width, label=label)
    ax1.axhline(1.0, color="black", linewidth=0.8)
    ax1.set_yscale("log")
    from matplotlib.ticker import FuncFormatter

    fmt = FuncFormatter(lambda v, _pos: f"{v:g}x")
    ax1.yaxis.set_major_formatter(fmt)
    ax1.yaxis.set_minor_formatter(fmt)
    ax1.tick_params(axis="y", which="minor", labelsize=7)
    ax1.set_xticks(range(len(tasks)))
    ax1.set_xticklabels(tasks, rotation=60, ha="right", fontsize=7)
    ax1.set_ylabel("end-to-end speedup over ar (x)")
    ax1.set_title("Speedup per task")
    if methods:
        ax1.legend(fontsize=8)

    for m, s in doc["methods"].items():
        hist = {int(k): v for k, v in s.get("accept_hist", {}).items()}
        tokens = sum(k * v for k, v in hist.items())
        if not tokens:
            continue
        ks = sorted(hist)
        ks = [ks[0], *ks] if ks else ks  # start each curve at zero
        cum, acc = [0.0], 0
        for k in ks[1:]:
            acc += k * hist[k]
            cum.append(acc / tokens)
        ax2.step(ks, cum, where="post", label=f"{m} (T={s['mean_accepted']:.2f})")
    ax2.set_xlabel("tokens emitted by a decode pass (k)")
    ax2.set_ylabel("share of generated tokens from passes of <= k")
    ax2.set_ylim(0, 1.02)
    ax2.set_xscale("log", base=2)
    ax2.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax2.set_xlim(left=0.9)
    ax2.set_title("Accepted length")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
