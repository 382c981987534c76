"""What :func:`~adapld_cli.model.loader.load` would use, without loading weights or touching
the network: :func:`model_info` for one spec, :func:`embedded_models` for every embedded model
with its state (`adapld model info`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adapld_cli.model.assemble import find_embedded_part, reinstall_hint
from adapld_cli.model.convert import cache_state
from adapld_cli.model.loader import (
    EMBEDDED,
    _activations,
    _cache_for,
    _embedded_target,
    _hub_cached,
    _placement,
    _quantized_reason,
    classify,
    embedded_source_id,
)
from adapld_cli.model.paths import DEFAULT_EMBEDDED, EMBEDDED_MODELS, EmbeddedModel, cache_dir


def _disk_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def model_info(
    spec: str | None = None,
    device: str | None = None,
    dtype: str = "auto",
    weights: str | None = None,
) -> dict[str, Any]:
    """What :func:`load` would use, without loading weights or touching the network.

    Keys: ``spec``, ``name``, ``source``, ``state`` (``ready``/``needs prepare``/
    ``parts missing``/``not downloaded``), ``ready``, ``path`` (folder loaded from, or None),
    ``size_bytes`` (of ``path``, else of the source), ``device``, ``dtype``, ``weights``
    (``quantized``/``dequantized``, with ``weights_reason`` when auto cannot quantize),
    ``activations`` (quantized only: ``int8``/``bfloat16``), ``cache_dir``;
    embedded adds ``title``, ``upstream``, ``default``, ``parts`` and ``cache``; gguf adds
    ``gguf`` and ``cache``.
    """
    target = classify(spec)
    placement, quantized = _placement(target, device, dtype, weights)
    info: dict[str, Any] = {
        "spec": target.spec,
        "name": target.name,
        "source": target.kind,
        "device": placement.device,
        "dtype": placement.dtype,
        "weights": "quantized" if quantized else "dequantized",
        "cache_dir": str(cache_dir()),
    }
    if quantized:
        info["activations"] = _activations()
    reason = _quantized_reason(target, placement)
    if reason and target.kind in (EMBEDDED, "gguf"):
        info["weights_reason"] = reason
    if target.embedded is not None:
        info.update(_embedded_info(target.embedded, quantized))
    elif target.kind == "gguf":
        assert target.path is not None
        folder, source_id = _cache_for(target, quantized)
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


def _embedded_info(model: EmbeddedModel, quantized: bool = False) -> dict[str, Any]:
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
    folder = _embedded_target(model, quantized)
    info.update(_cache_info(folder, embedded_source_id(model), model.size, have))
    return info


def embedded_models(quantized: bool = False) -> list[dict[str, Any]]:
    """Every embedded model: ``name``, ``title``, ``upstream``, ``default``, ``state``,
    ``size_bytes`` (of the cache for ``quantized`` weights or not, when ready, else of the
    GGUF), ``summary``. No weights loaded."""
    rows = []
    for model in EMBEDDED_MODELS.values():
        info = _embedded_info(model, quantized)
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


def gguf_facts(path: Path) -> dict[str, Any]:
    """A GGUF's architecture and tensor types, read from its header (no tensor data), and
    whether adapld's exact quantized CPU kernels cover it (``kernels``: ``None`` when they do,
    else the reason it runs on dequantised bfloat16 weights)."""
    from gguf import GGUFReader

    from adapld_cli.model.convert import KERNEL_ARCHS, QUANT_TYPES, gguf_architecture

    try:
        reader = GGUFReader(str(path), "r")
    except (OSError, ValueError) as exc:
        return {"architecture": None, "types": [], "kernels": f"not a readable GGUF ({exc})"}
    arch = gguf_architecture(reader)
    types = sorted({t.tensor_type.name for t in reader.tensors})
    floats = {"F32", "F16", "BF16"}
    other = [t for t in types if t not in floats and t not in QUANT_TYPES]
    why = None
    if arch not in KERNEL_ARCHS:
        why = f"architecture {arch}: the exact kernels cover {', '.join(KERNEL_ARCHS)}"
    elif not any(t in QUANT_TYPES for t in types):
        why = f"no tensors of a type the kernels take ({', '.join(QUANT_TYPES)})"
    elif other:
        why = f"{', '.join(other)} tensors: the exact kernels cover {', '.join(QUANT_TYPES)}"
    return {"architecture": arch, "types": types, "kernels": why}
