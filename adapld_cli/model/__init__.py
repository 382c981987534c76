"""The model layer: find, prepare and load the language model adapld edits with.

Public API (heavy imports happen inside the functions, so importing this is instant)::

    from adapld_cli.model import load, model_info, prepare, resolve_spec, cache_dir
    from adapld_cli.model import LoadedModel, ModelError

- ``load(spec=None, *, device=None, dtype="auto", verbose=False, progress=None) -> LoadedModel``
- ``model_info(spec=None, device=None, dtype="auto") -> dict`` (no weights loaded)
- ``prepare(spec=None, progress=None) -> Path`` (one-time assembly / conversion / download)
- ``resolve_spec(spec) -> str``: ``--model``, else ``$ADAPLD_MODEL``, else ``"embedded"``
- ``cache_dir() -> Path``: ``$ADAPLD_HOME``, else the user cache dir (``~/.cache/adapld``)

A spec is ``"embedded"`` (Qwen2.5-Coder-0.5B-Instruct shipped as six PyPI wheels, assembled,
verified and converted once to ``<cache_dir>/models/embedded-…``), a hub id, a local model
folder, or a ``.gguf`` file (converted once, cache keyed by path + size + mtime).
"""

from adapld_cli.model.errors import LoadedModel, ModelError
from adapld_cli.model.loader import load, model_info, prepare, resolve_spec
from adapld_cli.model.paths import cache_dir

__all__ = [
    "LoadedModel",
    "ModelError",
    "cache_dir",
    "load",
    "model_info",
    "prepare",
    "resolve_spec",
]
