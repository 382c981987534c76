"""Resolve a model spec, prepare its files once, load it onto the chosen device.

Contract:
- :func:`resolve_spec`: ``--model`` value, else ``$ADAPLD_MODEL``, else the default embedded
  model's name (``coder-1.5b``).
- :func:`classify`: an embedded model's name (``coder-1.5b``, ``coder-0.5b``; ``embedded`` is the
  default one) is ``"embedded"``; an existing ``.gguf`` file (or a folder holding exactly one
  ``.gguf`` and no ``config.json``) is ``"gguf"``; an existing folder is ``"local"``; anything
  else that does not look like a path is a Hugging Face hub id (``"hub"``).
- :func:`prepare`: the one-time work (embedded: assemble + verify + convert, then remove the
  caches of embedded models or cache formats no longer shipped; gguf: convert; hub: download
  unless cached; local: nothing) and returns the folder to load from.
- :func:`load`: prepare, then ``from_pretrained`` model and tokenizer from the same folder with
  accelerate placement, in eval mode. Hub ids are tried from the local HF cache first.
- :func:`model_info`: what load would do, without loading weights or touching the network;
  :func:`embedded_models` lists every embedded model with its state.
Everything the user can fix raises :class:`ModelError` (one line).
"""

from __future__ import annotations

import hashlib
import os
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapld_cli.model import kernels
from adapld_cli.model.assemble import (
    assemble,
    find_embedded_part,
    locate_embedded_parts,
    reinstall_hint,
)
from adapld_cli.model.clean import in_use, remove_obsolete
from adapld_cli.model.convert import cache_state, convert_gguf, restore_packed
from adapld_cli.model.errors import ModelError
from adapld_cli.model.paths import (
    DEFAULT_EMBEDDED,
    EMBEDDED_MODELS,
    ENV_MODEL,
    EmbeddedModel,
    cache_dir,
    models_dir,
)
from adapld_cli.model.placement import resolve_placement
from adapld_cli.model.progress import want_progress

EMBEDDED = "embedded"


@dataclass
class LoadedModel:
    """What :func:`load` returns: a model ready for the engine, in eval mode, with the tokenizer
    from the same source.

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


@dataclass(frozen=True)
class Target:
    """A classified model spec."""

    kind: str  # "embedded" | "hub" | "local" | "gguf"
    spec: str
    name: str
    path: Path | None = None  # the folder or .gguf file for local/gguf
    embedded: EmbeddedModel | None = None


def resolve_spec(spec: str | None) -> str:
    """The model to use: the option value, else ``$ADAPLD_MODEL``, else ``coder-1.5b``."""
    for value in (spec, os.environ.get(ENV_MODEL)):
        if value and value.strip():
            return value.strip()
    return DEFAULT_EMBEDDED


def embedded_model(spec: str) -> EmbeddedModel | None:
    """The embedded model a spec names (``embedded`` = the default one), else None."""
    name = spec.strip().lower()
    if name == EMBEDDED:
        name = DEFAULT_EMBEDDED
    return EMBEDDED_MODELS.get(name)


def _offline() -> bool:
    return any(
        os.environ.get(var, "").strip().lower() in {"1", "true", "yes", "on"}
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _offline_error(spec: str) -> ModelError:
    return ModelError(
        f"cannot download model {spec} (offline?) — pass a local folder or .gguf with "
        f"--model / {ENV_MODEL}"
    )


def classify(spec: str | None) -> Target:
    """Decide what kind of model ``spec`` names (see the module contract)."""
    spec = resolve_spec(spec)
    known = embedded_model(spec)
    if known is not None:
        return Target(EMBEDDED, spec, known.name, embedded=known)
    path = Path(spec).expanduser()
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelError(f"--model {spec}: a file must be a .gguf checkpoint")
        return Target("gguf", spec, path.name, path.resolve())
    if path.is_dir():
        ggufs = sorted(path.glob("*.gguf"))
        if not (path / "config.json").is_file():
            if len(ggufs) == 1:
                return Target("gguf", spec, ggufs[0].name, ggufs[0].resolve())
            what = f"{len(ggufs)} .gguf files" if ggufs else "no config.json"
            raise ModelError(f"--model {spec}: not a model folder ({what})")
        return Target("local", spec, path.resolve().name, path.resolve())
    looks_like_path = (
        spec.startswith((".", "/", "~", "\\"))
        or spec.lower().endswith(".gguf")
        or spec.count("/") > 1
        or (os.sep != "/" and os.sep in spec)
    )
    if looks_like_path:
        raise ModelError(f"--model {spec}: no such file or folder")
    if spec.lower().startswith("coder-"):
        names = ", ".join(EMBEDDED_MODELS)
        raise ModelError(f"--model {spec}: no such embedded model (there are: {names})")
    return Target("hub", spec, spec)


# ----------------------------------------------------------------------------- preparation


def _embedded_target(model: EmbeddedModel) -> Path:
    return models_dir() / model.key


def _embedded_gguf(model: EmbeddedModel) -> Path:
    return cache_dir() / "embedded" / model.gguf


def embedded_source_id(model: EmbeddedModel) -> str:
    """The ``source`` an embedded model's cache manifest records: its GGUF's sha256."""
    return f"embedded:{model.sha256}"


def _prepare_embedded(model: EmbeddedModel, progress: bool) -> Path:
    def make_gguf() -> Path:
        return assemble(
            locate_embedded_parts(model),
            _embedded_gguf(model),
            size=model.size,
            sha256=model.sha256,
            hint=reinstall_hint(model),
            progress=progress,
        )

    def tidy() -> None:
        # The safetensors cache is all we load from; the parts stay installed, so the GGUF can
        # be re-assembled if the cache is ever rebuilt. Caches of models or cache formats no
        # longer shipped go too.
        _embedded_gguf(model).unlink(missing_ok=True)
        remove_obsolete(models_dir(), _current_embedded(), only_embedded=True)

    return convert_gguf(
        make_gguf,
        _embedded_target(model),
        source_id=embedded_source_id(model),
        name=model.title,
        extra={"embedded": model.name, "source_sha256": model.sha256, "source_size": model.size},
        progress=progress,
        after=tidy,
    )


def clean(dry_run: bool = False) -> list[tuple[Path, int]]:
    """Remove caches nothing will load again (see :mod:`adapld_cli.model.clean`) and assembled
    GGUFs left by an interrupted prepare; return what was (or would be) removed, with bytes."""
    removed = remove_obsolete(models_dir(), _current_embedded(), dry_run=dry_run)
    folder = cache_dir() / "embedded"
    if folder.is_dir():
        targets = {m.gguf: _embedded_target(m) for m in EMBEDDED_MODELS.values()}
        for entry in sorted(folder.iterdir()):
            name = entry.name.split(".tmp")[0].lstrip(".").rsplit(".gguf", 1)[0] + ".gguf"
            target = targets.get(name)
            current_lock = target is not None and entry.name == f"{name}.lock"
            if entry.is_file() and not current_lock and (target is None or not in_use(target)):
                removed.append((entry, entry.stat().st_size))
                if not dry_run:
                    entry.unlink(missing_ok=True)
    return removed


def _current_embedded() -> dict[str, str]:
    """Cache folder name -> source id of every embedded model this version ships."""
    return {m.key: embedded_source_id(m) for m in EMBEDDED_MODELS.values()}


def _gguf_key(path: Path) -> tuple[str, str]:
    """Cache folder name and source id for a user GGUF: keyed by path, size and mtime."""
    st = path.stat()
    source_id = f"gguf:{path}:{st.st_size}:{st.st_mtime_ns}"
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", path.stem).strip("-")[:60] or "model"
    return f"gguf-{slug}-{hashlib.sha256(source_id.encode()).hexdigest()[:12]}", source_id


def _cache_for(target: Target) -> tuple[Path, str]:
    """Converted-cache folder and source id of an embedded or gguf target."""
    if target.embedded is not None:
        return _embedded_target(target.embedded), embedded_source_id(target.embedded)
    assert target.path is not None
    key, source_id = _gguf_key(target.path)
    return models_dir() / key, source_id


def _prepare_gguf(path: Path, progress: bool) -> Path:
    key, source_id = _gguf_key(path)
    return convert_gguf(
        path, models_dir() / key, source_id=source_id, name=path.name, progress=progress
    )


def _hub_cached(spec: str) -> Path | None:
    """The local HF-cache snapshot of a hub model, or None. Never touches the network."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(spec, "config.json")
    except Exception:  # invalid repo id and the like
        return None
    return Path(found).parent if isinstance(found, str) else None


def _prepare_hub(spec: str) -> Path:
    cached = _hub_cached(spec)
    if cached is not None:
        return cached
    if _offline():
        raise _offline_error(spec)
    try:
        from huggingface_hub import snapshot_download

        # What from_pretrained reads; skips .bin/.onnx/.gguf duplicates some repos carry.
        patterns = ["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja", "*.tiktoken"]
        return Path(snapshot_download(spec, allow_patterns=patterns))
    except Exception as exc:
        raise _hub_error(spec, exc) from exc


def _hub_error(spec: str, exc: BaseException) -> ModelError:
    text = f"{type(exc).__name__}: {exc}"
    if re.search(r"RepositoryNotFound|not a valid model identifier|404", text):
        return ModelError(
            f"no model {spec} on the Hugging Face hub — pass a hub id, a local folder or "
            f"a .gguf with --model / {ENV_MODEL}"
        )
    return _offline_error(spec)


def prepare(
    spec: str | None = None, progress: bool | None = None, *, verbose: bool = False
) -> Path:
    """Do the one-time work for ``spec`` now; return the folder the model loads from."""
    target = classify(spec)
    if target.kind == "local":
        assert target.path is not None
        return target.path
    if target.kind in (EMBEDDED, "gguf"):
        folder, source_id = _cache_for(target)
        if cache_state(folder, source_id) == "ready":  # nothing to do: stay instant
            return folder
    show = want_progress(progress)
    with quiet(verbose):
        if target.embedded is not None:
            return _prepare_embedded(target.embedded, show)
        if target.kind == "gguf":
            assert target.path is not None
            return _prepare_gguf(target.path, show)
        return _prepare_hub(target.spec)


# ----------------------------------------------------------------------------- loading


@contextmanager
def quiet(verbose: bool) -> Iterator[None]:
    """Silence transformers / hub logging, progress bars and Python warnings unless verbose."""
    if verbose:
        yield
        return
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars

        hub_bars_off = are_progress_bars_disabled()
        disable_progress_bars()
    except ImportError:  # pragma: no cover
        hub_bars_off = True
    # transformers' GGUF de-quantisation uses a bare ``tqdm.auto`` bar that its own switch does
    # not reach; swap in a disabled one for the duration.
    import functools

    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    gguf_tqdm = getattr(gguf_utils, "tqdm", None)
    if gguf_tqdm is not None:
        gguf_utils.tqdm = functools.partial(gguf_tqdm, disable=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        if gguf_tqdm is not None:
            gguf_utils.tqdm = gguf_tqdm
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()
        if not hub_bars_off:
            from huggingface_hub.utils import enable_progress_bars

            enable_progress_bars()


def _device_label(model: Any) -> str:
    placed = getattr(model, "hf_device_map", None) or {}
    devices = sorted({f"cuda:{d}" if isinstance(d, int) else str(d) for d in placed.values()})
    if len(devices) > 1:
        return f"auto ({', '.join(devices)})"
    if devices:
        return devices[0]
    return str(next(model.parameters()).device)


def _from_pretrained(cls: Any, ref: str, *, hub: bool, **kwargs: Any) -> Any:
    """``cls.from_pretrained``; for hub ids the local HF cache first, then the network."""
    if not hub:
        return cls.from_pretrained(ref, local_files_only=True, **kwargs)
    try:
        return cls.from_pretrained(ref, local_files_only=True, **kwargs)
    except (OSError, ValueError):
        if _offline():
            raise _offline_error(ref) from None
    try:
        return cls.from_pretrained(ref, **kwargs)
    except Exception as exc:
        raise _hub_error(ref, exc) from exc


def load(
    spec: str | None = None,
    *,
    device: str | None = None,
    dtype: str = "auto",
    verbose: bool = False,
    progress: bool | None = None,
) -> LoadedModel:
    """Load model + tokenizer for ``spec`` (see :func:`resolve_spec`), ready for the engine."""
    target = classify(spec)
    placement = resolve_placement(device, dtype)
    show = want_progress(progress)
    with quiet(verbose):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if target.embedded is not None:
            folder: Path | None = _prepare_embedded(target.embedded, show)
        elif target.kind == "gguf":
            assert target.path is not None
            folder = _prepare_gguf(target.path, show)
        elif target.kind == "local":
            folder = target.path
        else:
            folder = None
        ref = str(folder) if folder is not None else target.spec
        hub = folder is None
        try:
            model = _from_pretrained(
                AutoModelForCausalLM,
                ref,
                hub=hub,
                dtype=placement.torch_dtype(),
                device_map=placement.device_map,
            )
            tokenizer = _from_pretrained(AutoTokenizer, ref, hub=hub)
        except ModelError:
            raise
        except (OSError, ValueError) as exc:
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ModelError(f"cannot load model {target.spec}: {reason}") from exc
    if folder is not None:
        restore_packed(model, folder)
    model.eval()
    kernels.apply(model)  # prepacked, batch-invariant CPU kernels ($ADAPLD_KERNELS=stock: off)
    path = ref if folder is not None else str(getattr(model, "name_or_path", ref))
    if hub:
        path = str(_hub_cached(target.spec) or path)
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name=target.name,
        source=target.kind,
        path=path,
        device=_device_label(model),
        dtype=str(next(model.parameters()).dtype).removeprefix("torch."),
    )


# ----------------------------------------------------------------------------- info


def _disk_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def model_info(
    spec: str | None = None, device: str | None = None, dtype: str = "auto"
) -> dict[str, Any]:
    """What :func:`load` would use, without loading weights or touching the network.

    Keys: ``spec``, ``name``, ``source``, ``state`` (``ready``/``needs prepare``/
    ``parts missing``/``not downloaded``), ``ready``, ``path`` (folder loaded from, or None),
    ``size_bytes`` (of ``path``, else of the source), ``device``, ``dtype``, ``cache_dir``;
    embedded adds ``title``, ``upstream``, ``default``, ``parts`` and ``cache``; gguf adds
    ``gguf`` and ``cache``.
    """
    target = classify(spec)
    placement = resolve_placement(device, dtype)
    info: dict[str, Any] = {
        "spec": target.spec,
        "name": target.name,
        "source": target.kind,
        "device": placement.device,
        "dtype": placement.dtype,
        "cache_dir": str(cache_dir()),
    }
    if target.embedded is not None:
        info.update(_embedded_info(target.embedded))
    elif target.kind == "gguf":
        assert target.path is not None
        folder, source_id = _cache_for(target)
        info["gguf"] = str(target.path)
        info.update(_cache_info(folder, source_id, target.path.stat().st_size, True))
    elif target.kind == "local":
        assert target.path is not None
        info.update(state="ready", path=str(target.path), size_bytes=_disk_size(target.path))
    else:
        cached = _hub_cached(target.spec)
        if cached is not None:
            info.update(state="ready", path=str(cached), size_bytes=_disk_size(cached.resolve()))
        else:
            info.update(state="not downloaded", path=None, size_bytes=None)
    info["ready"] = info["state"] == "ready"
    return info


def _cache_info(folder: Path, source_id: str, source_size: int, have_source: bool) -> dict:
    state = cache_state(folder, source_id)
    info: dict[str, Any] = {"cache": {"path": str(folder), "state": state}}
    if state == "ready":
        info.update(state="ready", path=str(folder), size_bytes=_disk_size(folder))
    else:
        info.update(
            state="needs prepare" if have_source else "parts missing",
            path=None,
            size_bytes=source_size,
        )
    return info


def _embedded_info(model: EmbeddedModel) -> dict[str, Any]:
    found = [(p, find_embedded_part(p)) for p in model.parts]
    info: dict[str, Any] = {
        "title": model.title,
        "upstream": model.upstream,
        "default": model.name == DEFAULT_EMBEDDED,
        "parts": [
            {"package": p.dist, "path": str(path) if path else None, "size_bytes": p.size}
            for p, path in found
        ],
        "reinstall": reinstall_hint(model, [p for p, path in found if path is None] or None),
    }
    if model.extra and not any(path for _, path in found):
        info["reinstall"] = f"run `pip install 'adapld[{model.extra}]'`"
    have = all(path for _, path in found)
    info.update(_cache_info(_embedded_target(model), embedded_source_id(model), model.size, have))
    return info


def embedded_models() -> list[dict[str, Any]]:
    """Every embedded model: ``name``, ``title``, ``upstream``, ``default``, ``state``,
    ``size_bytes`` (of the cache when ready, else of the GGUF), ``summary``. No weights loaded."""
    rows = []
    for model in EMBEDDED_MODELS.values():
        info = _embedded_info(model)
        rows.append(
            {
                "name": model.name,
                "title": model.title,
                "upstream": model.upstream,
                "default": info["default"],
                "state": info["state"],
                "size_bytes": info["size_bytes"],
                "summary": model.summary,
            }
        )
    return rows
