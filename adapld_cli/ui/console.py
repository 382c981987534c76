"""The stderr console and the decision whether to draw a live panel.

Contract: everything the UI draws goes to stderr; stdout is for data only. Colour is off under
``NO_COLOR`` (https://no-color.org) and inside pre-commit (``PRE_COMMIT``), where the output
is shown as plain text. The live panel needs an interactive stderr and is off inside
pre-commit, in CI (``CI``), on ``TERM=dumb`` and with ``--no-live``.
"""

from __future__ import annotations

import os
from typing import Any


def _env_on(name: str) -> bool:
    value = os.environ.get(name)
    return value is not None and value.strip().lower() not in ("", "0", "false", "no")


def plain_output() -> bool:
    """True when no colour or cursor codes may be written."""
    return bool(os.environ.get("NO_COLOR")) or _env_on("PRE_COMMIT")


def stderr_console() -> Any:
    """A Rich console on stderr that honours NO_COLOR and PRE_COMMIT."""
    from rich.console import Console

    if plain_output():
        return Console(stderr=True, color_system=None, no_color=True, highlight=False)
    return Console(stderr=True, highlight=False)


def live_wanted(console: Any, *, no_live: bool = False, quiet: bool = False) -> bool:
    """Whether to draw the live panel on ``console``."""
    if no_live or quiet or plain_output() or _env_on("CI"):
        return False
    if os.environ.get("TERM") == "dumb":
        return False
    return bool(console.is_terminal)
