"""Summaries and renderings of benchmark rows: JSON document, Markdown, Rich table.

Contract: :func:`summarize` turns the per-(task, method) rows of
:class:`~adapld_cli.bench.runner.BenchRunner` into one summary per method; :func:`document`
builds the JSON document (top-level ``meta``, ``methods`` = method -> summary, ``tasks`` = the
rows, ``skipped``, ``problems``); :func:`markdown` and :func:`rich_table` render it.
:func:`problems` lists greedy outputs of the engine's methods that differ from ``ar`` (always a
bug: they are lossless) — the CLI prints them loudly and exits 1; ``baseline_differences``
lists those of the transformers baselines (printed as a note: not an adapld bug);
``graph_fallbacks`` the runs whose CUDA graph capture failed (their passes ran eagerly:
slower, and on another kernel path than the runs whose capture held).

Summary keys: ``tasks``, ``new_tokens``, ``total_s``, ``tok_s`` (end-to-end tokens/s over all
tasks), ``prefill_s``, ``decode_s``, ``decode_tok_s``, ``speedup_vs_ar`` (geometric mean over
tasks of the per-task end-to-end tokens/s ratio to ``ar``), ``speedup_median``,
``speedup_min``, ``speedup_max``, ``forward_passes`` (F), ``mean_accepted`` (T = tokens per
decode pass), ``draft_acceptance``, ``lexical_nohit_rate``, ``semantic_steps``,
``semantic_accepted``, ``branch_steps``, ``branch_accepted``, ``peak_rss_mb``,
``identical_to_ar`` (tasks; ``None`` without ``ar``), ``compared_to_ar``, ``pass_at_1``
(``None`` without tests; of the last attempt), ``pass_at_1_first`` (of the first attempt),
``attempts`` (generations), ``repaired`` (tasks asked again), ``repair_time_ratio`` (median repair
attempt s / first attempt s), ``refused``, ``unchanged`` (last
attempts), ``first_refused``, ``first_unchanged``, ``accept_hist``, ``stop_reasons``.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from adapld_cli.bench.methods import must_match_ar

PARTS_SUFFIX = "/parts"  # a method run on a big file's parts (bench.runner)


def summarize(rows: list[dict[str, Any]], methods: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for method in methods:
        rs = [r for r in rows if r["method"] == method]
        if not rs:
            continue
        out[method] = _summary(rs)
        if method.endswith(PARTS_SUFFIX):
            whole = [r for r in rows if r["method"] == method.removesuffix(PARTS_SUFFIX)]
            out[method].update(_against_whole(rs, whole))
    return out


def _against_whole(parts: list[dict[str, Any]], whole: list[dict[str, Any]]) -> dict[str, Any]:
    """A ``/parts`` label against its whole-file method, over the tasks that had a plan:
    ``planned`` (tasks), ``time_vs_whole`` (median per-task wall-time ratio) and
    ``tokens_vs_whole`` (the same for generated tokens)."""
    by_task = {r["task"]: r for r in whole}
    pairs = [(r, by_task[r["task"]]) for r in parts if r.get("plan") and r["task"] in by_task]

    def median(key: str) -> float | None:
        ratios = [p[key] / w[key] for p, w in pairs if w[key]]
        return round(statistics.median(ratios), 4) if ratios else None

    return {
        "planned": len(pairs),
        "time_vs_whole": median("total_s"),
        "tokens_vs_whole": median("new_tokens"),
    }


def _summary(rs: list[dict[str, Any]]) -> dict[str, Any]:
    def total(key: str) -> float:
        return sum(r[key] or 0 for r in rs)

    n_tok = int(total("new_tokens"))
    t_all, t_dec = total("total_s"), total("decode_s")
    passes = int(total("forward_passes"))
    speed = [r["speedup_vs_ar"] for r in rs if r["speedup_vs_ar"]]
    compared = [r for r in rs if r["identical_to_ar"] is not None]
    tested = [r for r in rs if r["passed"] is not None]
    lex = total("lexical_steps") + total("lexical_nohit_steps")
    hist: dict[int, int] = {}
    stops: dict[str, int] = {}
    for r in rs:
        for k, v in r["accept_hist"].items():
            hist[int(k)] = hist.get(int(k), 0) + v
        stops[str(r["stop_reason"])] = stops.get(str(r["stop_reason"]), 0) + 1
    peaks = [r["peak_rss_mb"] for r in rs if r["peak_rss_mb"] is not None]
    pass_s = sum(r.get("pass_s") or 0 for r in rs)  # 0: not measured (baselines, old reports)
    drafted = total("drafted_tokens")
    return {
        "tasks": len(rs),
        "new_tokens": n_tok,
        "total_s": round(t_all, 3),
        "tok_s": round(n_tok / t_all, 3) if t_all > 0 else 0.0,
        "prefill_s": round(total("prefill_s"), 3),
        "decode_s": round(t_dec, 3),
        "decode_tok_s": round(n_tok / t_dec, 3) if t_dec > 0 else 0.0,
        "speedup_vs_ar": round(geomean(speed), 4) if speed else None,
        "speedup_median": round(statistics.median(speed), 4) if speed else None,
        "speedup_min": round(min(speed), 4) if speed else None,
        "speedup_max": round(max(speed), 4) if speed else None,
        "forward_passes": passes,
        "mean_accepted": round(n_tok / passes, 4) if passes else 0.0,
        "host_ms_per_pass": round(max(0.0, t_dec - pass_s) / passes * 1e3, 3)
        if passes and pass_s > 0
        else None,
        "drafted_tokens": int(drafted),
        "accepted_draft_tokens": int(total("accepted_draft_tokens")),
        "draft_acceptance": round(total("accepted_draft_tokens") / drafted, 4) if drafted else None,
        "lexical_nohit_rate": round(total("lexical_nohit_steps") / lex, 4) if lex else None,
        "lexical_accepted": int(total("lexical_accepted")),
        "semantic_steps": int(total("semantic_steps")),
        "semantic_accepted": int(total("semantic_accepted")),
        "branch_steps": int(total("branch_steps")),
        "branch_accepted": int(total("branch_accepted")),
        "peak_rss_mb": round(max(peaks), 1) if peaks else None,
        "identical_to_ar": sum(1 for r in compared if r["identical_to_ar"]) if compared else None,
        "compared_to_ar": len(compared),
        "pass_at_1": round(sum(1 for r in tested if r["passed"]) / len(tested), 4)
        if tested
        else None,
        "tests_run": len(tested),
        **_quality(rs),
        "accept_hist": {str(k): v for k, v in sorted(hist.items())},
        "stop_reasons": stops,
    }


def _with_feedback(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """pass@k with test feedback (``--test-feedback``): the share of tested tasks whose
    tests passed within k attempts, the k-1 repairs having seen the failing output; k = 1 is
    plain pass@1. Empty without such rows."""
    fed = [r for r in rs if "passed_at" in r]
    if not fed:
        return {}
    top = max((r.get("attempts") or 1) for r in fed)
    return {
        "pass_at_k_feedback": {
            str(k): round(
                sum(1 for r in fed if r["passed_at"] and r["passed_at"] <= k) / len(fed), 4
            )
            for k in range(1, top + 1)
        }
    }


def _quality(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """What the edits came to, first attempt and last (rows of reports made before
    ``--attempts`` count as one attempt each)."""
    first = [r for r in rs if r.get("passed_first") is not None]

    def count(key: str, value: str) -> int:
        return sum(1 for r in rs if (r.get(key) or r.get("status")) == value)

    return {
        "pass_at_1_first": round(sum(1 for r in first if r["passed_first"]) / len(first), 4)
        if first
        else None,
        "attempts": sum(r.get("attempts") or 1 for r in rs),
        "repaired": sum(1 for r in rs if (r.get("attempts") or 1) > 1),
        "refused": count("status", "refused"),
        "unchanged": count("status", "unchanged"),
        "first_refused": count("first_status", "refused"),
        "first_unchanged": count("first_status", "unchanged"),
        "repair_time_ratio": _repair_time_ratio(rs),
        "unrelated": sum(1 for r in rs if r.get("unrelated"))
        if any("unrelated" in r for r in rs)
        else None,
        **_with_feedback(rs),
    }


def _repair_time_ratio(rs: list[dict[str, Any]]) -> float | None:
    """The median over tasks asked again of a repair attempt's wall time (the mean of
    attempts 2..n) over the first attempt's; ``None`` without repairs."""
    ratios = [
        statistics.fmean(t[1:]) / t[0]
        for r in rs
        if len(t := r.get("attempt_s") or []) > 1 and t[0] > 0
    ]
    return round(statistics.median(ratios), 4) if ratios else None


def geomean(values: list[float]) -> float:
    vals = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else 0.0


def problems(rows: list[dict[str, Any]]) -> list[str]:
    """One line per output of a lossless method (the engine's, ablations) that differs from ar:
    always a bug."""
    return [
        _differs(r) for r in rows if r["identical_to_ar"] is False and must_match_ar(r["method"])
    ]


def baseline_differences(rows: list[dict[str, Any]]) -> list[str]:
    """One line per output of a transformers baseline that differs from ar: reported, but not
    an adapld bug (those run transformers' code, possibly on other kernels)."""
    return [
        _differs(r)
        for r in rows
        if r["identical_to_ar"] is False and not must_match_ar(r["method"])
    ]


def graph_fallbacks(rows: list[dict[str, Any]]) -> list[str]:
    """One line per run whose CUDA graph capture failed (``Stats.graph_fallback``)."""
    return [
        f"{r['method']} on {r['task']}: CUDA graph capture failed, passes ran eagerly "
        f"({r['graph_fallback']})"
        for r in rows
        if r.get("graph_fallback")
    ]


def _differs(r: dict[str, Any]) -> str:
    return (
        f"{r['method']} differs from ar on {r['task']} (first differing token at "
        f"{r['first_diff']}; {r['new_tokens']} tokens)"
    )


def progress_line(row: dict[str, Any], i: int, n: int) -> str:
    """One progress line for a measured row (``i`` of ``n``)."""
    sp = f" {row['speedup_vs_ar']:.2f}x" if row["speedup_vs_ar"] else ""
    same = "  DIFFERS FROM AR" if row["identical_to_ar"] is False else ""
    ok = {True: " pass", False: " fail", None: ""}[row["passed"]]
    if (row.get("attempts") or 1) > 1:
        ok = f" {row['first_status']} -> {row['status']} ({row['attempts']} attempts){ok}"
    return (
        f"[{i}/{n}] {row['task']} {row['method']}: {row['new_tokens']} tok "
        f"{row['total_s']:.1f}s {row['tok_s']:.1f} tok/s F={row['forward_passes']} "
        f"T={row['mean_accepted']:.2f}{sp}{ok}{same}"
    )


def document(
    meta: dict[str, Any],
    rows: list[dict[str, Any]],
    methods: list[str],
    skipped: list[dict[str, str]] | None = None,
    reference_pass: dict[str, bool] | None = None,
) -> dict[str, Any]:
    return {
        "meta": meta,
        "methods": summarize(rows, methods),
        "tasks": rows,
        "skipped": skipped or [],
        "reference_pass": reference_pass or {},
        "problems": problems(rows),
        "baseline_differences": baseline_differences(rows),
        "graph_fallbacks": graph_fallbacks(rows),
    }


# -- rendering ---------------------------------------------------------------------------
# header, summary key, format; two tables so each fits an 80-column terminal
SPEED_COLUMNS = (
    ("method", None, None),
    ("tasks", "tasks", "{:d}"),
    ("tokens", "new_tokens", "{:d}"),
    ("e2e s", "total_s", "{:.1f}"),
    ("tok/s", "tok_s", "{:.2f}"),
    ("decode tok/s", "decode_tok_s", "{:.2f}"),
    ("speedup", "speedup_vs_ar", "{:.2f}x"),
    ("median", "speedup_median", "{:.2f}x"),
    ("= ar", None, None),
    ("pass@1", "pass_at_1", "{:.0%}"),
)
DRAFT_COLUMNS = (
    ("method", None, None),
    ("F", "forward_passes", "{:d}"),
    ("T", "mean_accepted", "{:.2f}"),
    ("draft acc", "draft_acceptance", "{:.0%}"),
    ("no-hit", "lexical_nohit_rate", "{:.0%}"),
    ("sem steps/acc", None, None),
    ("branch steps/acc", None, None),
    ("host ms/pass", "host_ms_per_pass", "{:.2f}"),
    ("peak MiB", "peak_rss_mb", "{:.0f}"),
)


# what the edits came to (rendered when tests ran or a task took more than one attempt)
QUALITY_COLUMNS = (
    ("method", None, None),
    ("tested", "tests_run", "{:d}"),
    ("pass@1 first", "pass_at_1_first", "{:.0%}"),
    ("pass@1", "pass_at_1", "{:.0%}"),
    ("refused first/last", ("first_refused", "refused"), None),
    ("unchanged first/last", ("first_unchanged", "unchanged"), None),
    ("repaired", "repaired", "{:d}"),
    ("attempts", "attempts", "{:d}"),
    ("repair s / first s", "repair_time_ratio", "{:.2f}"),
    ("unrelated", "unrelated", "{:d}"),
    ("planned", "planned", "{:d}"),
    ("s vs whole", "time_vs_whole", "{:.2f}"),
    ("pass@k, test feedback", "pass_at_k_feedback", None),
)


def _tables(doc: dict[str, Any]) -> list[tuple]:
    """The column sets to render: speed, drafting and, when tests ran or a task was asked
    again, quality."""
    tables = [SPEED_COLUMNS, DRAFT_COLUMNS]
    quality = ("tests_run", "repaired", "unrelated", "planned")
    if any(
        s.get(k) is not None and s.get(k) != 0 for s in doc["methods"].values() for k in quality
    ):
        tables.append(QUALITY_COLUMNS)
    return tables


def _cell(header: str, key: Any, fmt: str | None, name: str, s: dict[str, Any]) -> str:
    if header == "method":
        return name
    if isinstance(key, tuple):
        return "/".join(str(s.get(k, "-")) for k in key)
    if header == "sem steps/acc":
        return f"{s['semantic_steps']}/{s['semantic_accepted']}"
    if header == "branch steps/acc":
        return f"{s['branch_steps']}/{s['branch_accepted']}"
    if key == "pass_at_k_feedback":
        fed = s.get(key) or {}
        return " · ".join(f"@{k} {v:.0%}" for k, v in fed.items()) or "-"
    if header == "= ar":
        if s["identical_to_ar"] is None:
            return "-"
        return f"{s['identical_to_ar']}/{s['compared_to_ar']}"
    value = s.get(key) if key else None
    if value is None or fmt is None:
        return "-"
    return fmt.format(value)


def table_cells(doc: dict[str, Any], columns: tuple = SPEED_COLUMNS) -> tuple[list, list]:
    headers = [c[0] for c in columns]
    body = [[_cell(*c, name, s) for c in columns] for name, s in doc["methods"].items()]
    return headers, body


def markdown(doc: dict[str, Any]) -> str:
    """Speed and drafting tables, and a per-task table (end-to-end speedup over ar, and T)."""
    lines: list[str] = []
    for columns in _tables(doc):
        headers, body = table_cells(doc, columns)
        if lines:
            lines.append("")
        lines += [_md_row(headers), _md_row(["---"] * len(headers))]
        lines += [_md_row(r) for r in body]
    methods = list(doc["methods"])
    by_task: dict[str, dict[str, dict[str, Any]]] = {}
    for r in doc["tasks"]:
        by_task.setdefault(r["task"], {})[r["method"]] = r
    if by_task:
        lines += ["", _md_row(["task", "tokens", *[f"{m} x (T)" for m in methods]])]
        lines.append(_md_row(["---"] * (len(methods) + 2)))
        for task, per in by_task.items():
            first = next(iter(per.values()))
            cells = [task, str(first["new_tokens"])]
            for m in methods:
                r = per.get(m)
                if r is None:
                    cells.append("-")
                    continue
                sp = f"{r['speedup_vs_ar']:.2f}x" if r["speedup_vs_ar"] else "-"
                mark = "" if r["identical_to_ar"] in (True, None) else " **≠ar**"
                cells.append(f"{sp} ({r['mean_accepted']:.1f}){mark}")
            lines.append(_md_row(cells))
    return "\n".join(lines) + "\n"


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def rich_table(doc: dict[str, Any]) -> Any:
    """The speed table and the drafting table, as one Rich renderable."""
    from rich import box
    from rich.console import Group
    from rich.table import Table

    meta = doc.get("meta", {})
    titles = (
        f"adapld bench · {meta.get('model', '?')} · {meta.get('n_tasks', '?')} tasks · speed",
        "drafting (F passes, T tokens/pass, no-hit = lexical misses, steps/accepted tokens,"
        " host = the engine's own work per pass outside the forward and acceptance walk)",
        "quality (pass@1 of the first attempt and of the last; refused / unchanged results;"
        " repaired = tasks asked again, --attempts)",
    )
    tables = []
    for title, columns in zip(titles, _tables(doc), strict=False):
        headers, body = table_cells(doc, columns)
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        for i, h in enumerate(headers):
            table.add_column(h, justify="left" if i == 0 else "right", no_wrap=True)
        for r in body:
            table.add_row(*r)
        tables.append(table)
    return Group(*tables)
