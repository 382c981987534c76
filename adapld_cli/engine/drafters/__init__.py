"""Drafting strategies: ``ar`` (none), ``pld`` (prompt lookup), ``adapld``."""

from __future__ import annotations

from adapld_cli.engine.drafters.adapld import AdaPLDDrafter
from adapld_cli.engine.drafters.ar import ARDrafter
from adapld_cli.engine.drafters.base import Drafter
from adapld_cli.engine.drafters.pld import PLDDrafter
from adapld_cli.engine.methods import METHODS
from adapld_cli.engine.settings import AdaPLDSettings


def make_drafter(method: str | Drafter, settings: AdaPLDSettings) -> Drafter:
    """The drafter for a method name with resolved ``settings``
    (:meth:`AdaPLDSettings.resolve`), or a :class:`Drafter` passed through."""
    if not isinstance(method, str):
        return method
    if method == "adapld":
        return AdaPLDDrafter(settings)
    if method == "pld":
        return PLDDrafter()
    if method == "ar":
        return ARDrafter()
    raise ValueError(f"unknown method {method!r} (choose from {', '.join(METHODS)})")


__all__ = ["METHODS", "AdaPLDDrafter", "ARDrafter", "Drafter", "PLDDrafter", "make_drafter"]
