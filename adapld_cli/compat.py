"""What differs between the transformers releases adapld supports (``pyproject.toml``), in one
place. Imports nothing heavy."""

from __future__ import annotations

import inspect
from typing import Any


def cache_keyword(forward: Any) -> str:
    """The name under which a transformers ``forward`` takes the KV cache (and its outputs
    return it): ``cache`` in recent releases, ``past_key_values`` before (5.17, say). The
    other name is swallowed by ``**kwargs`` there, and the forward builds a cache of its own."""
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"
