"""`adapld undo`: put back the files an earlier `adapld edit` run wrote.

Contract:
- ``adapld undo`` restores the newest run not undone yet; ``adapld undo N`` restores run
  ``N`` as numbered by ``adapld undo --list`` (1 = newest). A file is restored only if it
  still holds exactly the bytes adapld wrote; otherwise it is left alone and listed. Works
  from any directory (the journal keeps absolute paths).
- ``adapld undo --list`` prints recent runs on stdout (``--json``: one object per line) and
  changes nothing.
- stdout carries data only (the list); every message goes to stderr: one line per file
  (``PATH: restored`` / ``PATH: left alone — why``), then one summary line.
- Exit codes: 0 every file holds its original again; 1 some files were left alone;
  2 bad usage (empty journal, no such run, nothing left to undo, unreadable journal).
"""

from __future__ import annotations

import json
import os
from typing import Annotated, Any

import typer

from adapld_cli.cli.app import app

HELP = (
    "Undo an earlier edit: restore the files an `adapld edit` run wrote.\n\n"
    "Only files that still hold exactly what adapld wrote are restored; files changed "
    "since are listed and left alone."
)
EPILOG = (
    "Exit codes: 0 all files restored; 1 some files left alone (changed since the edit); "
    "2 bad usage (empty journal, no such run). The journal keeps the last 20 runs (at most "
    "200 MB) under $ADAPLD_JOURNAL (default $ADAPLD_HOME/journal, else "
    "~/.cache/adapld/journal)."
)

RunArg = Annotated[
    int | None,
    typer.Argument(
        metavar="N",
        help="The run to undo, as numbered by --list (1 = the newest). "
        "Default: the newest run not undone yet.",
        show_default=False,
    ),
]
ListOpt = Annotated[
    bool,
    typer.Option(
        "--list",
        "-l",
        metavar="",
        help="List recent runs on stdout (newest first); change nothing.",
    ),
]
JsonOpt = Annotated[
    bool,
    typer.Option("--json", metavar="", help="With --list: one JSON object per run and line."),
]
ForceOpt = Annotated[
    bool,
    typer.Option("--force", metavar="", help="Also restore files that have become read-only."),
]

_LEFT_ALONE = "left alone"


@app.command(help=HELP, epilog=EPILOG)
def undo(
    n: RunArg = None,
    list_runs: ListOpt = False,
    as_json: JsonOpt = False,
    force: ForceOpt = False,
) -> None:
    from adapld_cli.edit.errors import EditError
    from adapld_cli.edit.files.journal import Journal

    if as_json and not list_runs:
        _fail("--json goes with --list")
    if list_runs and n is not None:
        _fail("--list takes no run number (adapld undo N restores run N)")
    journal = Journal()
    try:  # the journal's errors only: a closed stdout (`| head`) is click's to handle
        runs = journal.list_runs() if list_runs else None
        report = None if list_runs else journal.undo(n, force=force)
    except EditError as exc:
        _fail(str(exc), exc.exit_code)
    except OSError as exc:
        _fail(f"cannot read the undo journal in {journal.root}: {exc.strerror or exc}")
    if runs is not None:
        _print_list(runs, as_json)
        return
    _print_report(report)
    raise typer.Exit(report.exit_code)


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"adapld: error: {message}", err=True)
    raise typer.Exit(code)


def _print_list(runs: list[Any], as_json: bool) -> None:
    """One line per run on stdout; a note on stderr when the journal is empty."""
    if not runs:
        if not as_json:
            typer.echo("adapld: the undo journal is empty", err=True)
        return
    for info in runs:
        typer.echo(json.dumps(info.to_json(), ensure_ascii=False) if as_json else _run_line(info))


def _run_line(info: Any) -> str:
    """``1  2026-11-30 08:12:03  calc.py, util.py  "rename foo to bar"  (undone: ...)``."""
    when = info.time.astimezone().strftime("%Y-%m-%d %H:%M:%S")
    files = [_shown(f.path) for f in info.files]
    names = ", ".join(files[:3]) + (f" (+{len(files) - 3} more)" if len(files) > 3 else "")
    line = f"{info.number:>2}  {when}  {names}  {json.dumps(_one_line(info.instruction))}"
    if info.undone:
        line += f"  (undone: {info.undone})"
    return line


def _print_report(report: Any) -> None:
    for outcome in report.outcomes:
        status = outcome.status if outcome.ok else _LEFT_ALONE
        if outcome.status == "already":  # "already holds the original", "gone, as before..."
            status = outcome.detail or "already holds the original"
        line = f"{_shown(outcome.path)}: {status}"
        if outcome.detail and outcome.status != "already":
            line += f" — {outcome.detail}"
        typer.echo(line, err=True)
    info = report.run
    when = info.time.astimezone().strftime("%Y-%m-%d %H:%M")
    typer.echo(
        f"adapld: undid run {info.number} ({when}, {json.dumps(_one_line(info.instruction))}): "
        f"{report.summary()} (exit {report.exit_code})",
        err=True,
    )


def _shown(path: str) -> str:
    """``path`` relative to the current directory when inside it, else absolute."""
    try:
        cwd = os.getcwd()
        rel = os.path.relpath(path, cwd)
    except (OSError, ValueError):
        return path
    return path if rel.startswith("..") or cwd == os.path.dirname(cwd) else rel


def _one_line(text: str, limit: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
