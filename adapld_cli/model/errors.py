"""Types shared by the model layer: the one error it raises and the loaded-model record.

Contract: every failure the user can act on (missing part, bad checksum, offline hub, unknown
device) surfaces as :class:`ModelError` whose ``str()`` is a single user-facing line; callers
print it and exit 2. Nothing else in the package needs to know about transformers exceptions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class ModelError(Exception):
    """A model could not be found, assembled, converted or placed. ``str()`` is one line."""


@dataclass
class LoadedModel:
    """A model ready for the engine, in eval mode, with the tokenizer from the same source.

    ``source`` is one of ``"embedded"``, ``"hub"``, ``"local"``, ``"gguf"``; ``path`` is the
    folder the weights were loaded from (for embedded/gguf: the converted safetensors cache);
    ``device`` is where the weights live (``"cpu"``, ``"cuda:0"``, or ``"auto (cuda:0, cuda:1)"``
    when accelerate spread them); ``dtype`` is the torch dtype name (``"float32"``).
    """

    model: Any
    tokenizer: Any
    name: str
    source: str
    path: str
    device: str
    dtype: str
