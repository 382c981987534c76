"""The decoding methods the engine runs: the one definition of their names.

``ar`` is plain decoding (one token per forward pass), ``pld`` prompt lookup with fixed-length
drafts, ``adapld`` the adaptive speculative method. Greedy output is identical for all three.
Benchmark-only baselines (transformers' own ``generate``) are defined in ``adapld_cli.bench``.
"""

from __future__ import annotations

from enum import Enum


class Method(str, Enum):
    """A decoding method the engine can run (``--method``)."""

    adapld = "adapld"
    pld = "pld"
    ar = "ar"


METHODS: tuple[str, ...] = tuple(m.value for m in Method)

METHOD_HELP = (
    "adapld: speculative copying with semantic fallback (fastest); pld: plain prompt lookup; "
    "ar: plain decoding, one token per forward pass. All give the same output when greedy."
)
