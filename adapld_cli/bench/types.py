"""Plain data of the benchmark, shared by the method runners and the runner loop (no torch).

:class:`MethodRun` is what running one method on one prompt gives back; it lives here, below
both ``methods`` (which dispatches) and ``hf`` (which runs transformers), so neither imports
the other's caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from adapld_cli.engine.types import Stats


@dataclass
class MethodRun:
    """One generation: tokens (the engine's stop rule applied), engine-style stats, wall time.

    ``extra`` carries measurements of the run that are not engine statistics (``peak_rss_mb``,
    ``raw_new_tokens`` of the transformers baselines).
    """

    tokens: list[int]
    stats: Stats
    stop_reason: str | None
    wall_s: float
    extra: dict[str, Any] = field(default_factory=dict)
