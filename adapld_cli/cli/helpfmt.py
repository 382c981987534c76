"""Help output with the metavars people expect: none for flags, TEXT/PATH/INTEGER for values.

Typer 0.29 prints a type label such as ``<bool>``, ``<str>`` or ``<path>`` after every option,
``<list[str]>`` after arguments and ``{PATH}...`` in the usage line. Commands registered with
``cls=PlainHelpCommand`` show an option's own ``metavar`` when it has one, nothing for flags
and arguments (their name is the metavar; ``PATH...`` in the usage line), and click's usual
upper-case type name otherwise (``[adapld|pld|ar]`` for choices).
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

_TYPE_NAMES = {int: "INTEGER", float: "FLOAT"}


class _PlainOption(TyperOption):
    def display_type_rich(self, ctx: Any) -> str | None:
        if self.metavar is not None:
            return self.metavar
        if self.is_flag or self.count:
            return None
        desc = self.type_descriptor
        if desc.is_choice:  # Typer's label is "<a|b|c>"; click's is "[a|b|c]"
            return f"[{self.display_type(ctx).strip('<>')}]"
        if desc.is_path:
            return "PATH"
        return _TYPE_NAMES.get(desc.annotation, "TEXT")


class _PlainArgument(TyperArgument):
    def display_type_rich(self, ctx: Any) -> str | None:
        return None

    def _usage_display_name(self) -> str:  # click's "PATH..." rather than "{PATH}..."
        name = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
        return name + ("..." if self.nargs != 1 else "")


class PlainHelpCommand(TyperCommand):
    """A Typer command whose help shows plain metavars (see the module docstring)."""

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)
        for param in params:
            if type(param) is TyperOption:
                param.__class__ = _PlainOption
            elif type(param) is TyperArgument:
                param.__class__ = _PlainArgument
        return params


class PlainHelpGroup(TyperGroup):
    """A Typer group whose ``--help`` option shows no ``<bool>`` type label."""

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option
