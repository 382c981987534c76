"""The Typer application: the root command, `--version`, and registration of sub-commands.

Each command lives in its own module under ``adapld_cli.cli`` and registers itself on ``app``
through :func:`_register`. Nothing heavy is imported here, so ``adapld --help`` is instant.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer
from typer.core import TyperCommand, TyperGroup

from adapld_cli import __version__
from adapld_cli.cli.helpfmt import PlainHelpCommand, PlainHelpGroup

app = typer.Typer(
    name="adapld",
    help=(
        "Edit source files with a local language model, fast.\n\n"
        "adapld rewrites whole files with a local LLM and uses AdaPLD speculative decoding "
        "(drafts copied from your file, verified in one forward pass) so the edit appears "
        "several times faster than plain decoding, token for token identical to it."
    ),
    no_args_is_help=True,
    add_completion=False,
    cls=PlainHelpGroup,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich" if not os.environ.get("NO_COLOR") else None,
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"adapld {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            metavar="",
            callback=_version_callback,
            is_eager=True,
            show_default=False,
            help="Show the version and exit.",
        ),
    ] = False,
) -> None:
    """adapld: edit source files with a local language model, fast."""


def _register() -> None:
    """Import the command modules; each adds its commands to ``app``."""
    import importlib

    for name in ("edit", "model", "bench", "demo", "undo", "serve"):
        try:
            importlib.import_module(f"adapld_cli.cli.{name}")
        except ModuleNotFoundError as exc:  # a command module not written yet
            if exc.name != f"adapld_cli.cli.{name}":
                raise


def _plain_help(typer_app: typer.Typer) -> None:
    """Give every command and sub-group registered on ``typer_app`` the plain ``--help``."""
    for command in typer_app.registered_commands:
        if _default(command.cls) in (None, TyperCommand):
            command.cls = PlainHelpCommand
    for group in typer_app.registered_groups:
        sub = group.typer_instance
        if sub is not None:
            if _default(group.cls) in (None, TyperGroup):
                group.cls = PlainHelpGroup
            _plain_help(sub)


def _default(cls: object) -> object:
    """The class behind typer's ``DefaultPlaceholder`` (or ``cls`` itself)."""
    return getattr(cls, "value", cls)


_register()
_plain_help(app)


def main() -> None:
    """Console-script entry point."""
    from adapld_cli.edit.interrupt import ignore_after_run

    ignore_after_run()
    app()
