"""The AdaPLD decoding engine: lossless speculative decoding for Hugging Face causal LMs.

Public API::

    stream(model, prompt_ids, config, method="adapld", tokenizer=None, settings=None,
           reference=(), prefix=None, workspaces=None, profile_phases=False)
        -> Iterator[StepEvent]
    generate(...) -> GenerationResult
    PrefixCache()  # pass as prefix=: later prompts skip the prefill chunks they share
    Workspaces()  # pass as workspaces=: later generations take over static passes' caches
    workspaces.prepare() -> int  # a warm-up: static passes of every key span run (captured)

Types (``GenerationConfig``, ``StepEvent``, ``Stats``, ``Source``) import without torch;
``stream``/``generate`` import torch on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from adapld_cli.engine.methods import METHODS, Method
from adapld_cli.engine.settings import AdaPLDSettings
from adapld_cli.engine.types import (
    GenerationConfig,
    GenerationResult,
    Source,
    Stats,
    StepEvent,
    UnsupportedModelError,
)

if TYPE_CHECKING:
    from adapld_cli.engine.loop import generate, stream
    from adapld_cli.engine.prefix import PrefixCache
    from adapld_cli.engine.workspaces import Workspaces


def __getattr__(name: str) -> Any:  # lazy: keep torch out of `import adapld_cli.engine`
    if name in ("stream", "generate"):
        from adapld_cli.engine import loop

        return getattr(loop, name)
    if name == "Workspaces":
        from adapld_cli.engine.workspaces import Workspaces

        return Workspaces
    if name == "PrefixCache":
        from adapld_cli.engine.prefix import PrefixCache

        return PrefixCache
    raise AttributeError(name)


__all__ = [
    "METHODS",
    "Method",
    "AdaPLDSettings",
    "PrefixCache",
    "GenerationConfig",
    "GenerationResult",
    "Source",
    "Stats",
    "StepEvent",
    "UnsupportedModelError",
    "Workspaces",
    "generate",
    "stream",
]
