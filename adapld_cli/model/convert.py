"""Convert a GGUF checkpoint once into a safetensors folder that reloads in seconds.

Contract: :func:`convert_gguf` produces ``target`` (a normal transformers folder: config,
``model.safetensors`` in float32, tokenizer with its chat template, generation config) plus a
manifest ``adapld-manifest.json`` written last. :func:`cache_state` tells whether a folder is
"ready", "stale" (made from another source, by an older cache format or another transformers
major version) or "missing". Conversion runs under ``<target>.lock``; it writes into a temp
folder next to ``target`` and renames it into place, so a reader never sees a partial cache and
a second process waiting on the lock finds the first one's result. Dequantising is what takes
the time (~1 min, ~4 GB RAM for the embedded 0.5B model).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from adapld_cli.model.errors import ModelError
from adapld_cli.model.progress import step

MANIFEST = "adapld-manifest.json"
FORMAT = 1


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The folder's manifest, or None if absent or unreadable."""
    try:
        return json.loads((Path(folder) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _transformers_major() -> str:
    from importlib.metadata import version

    return version("transformers").split(".")[0]


def cache_state(folder: Path, source_id: str) -> str:
    """``"ready"``, ``"stale"`` or ``"missing"`` for the converted cache in ``folder``."""
    manifest = read_manifest(folder)
    if manifest is None:
        return "stale" if Path(folder).exists() else "missing"
    if (
        manifest.get("format") != FORMAT
        or manifest.get("source") != source_id
        or str(manifest.get("transformers", "")).split(".")[0] != _transformers_major()
    ):
        return "stale"
    files = manifest.get("files") or []
    if not files or not all((Path(folder) / f).is_file() for f in files):
        return "stale"
    return "ready"


def _load_gguf(gguf: Path) -> tuple[Any, Any]:
    """Load and fully dequantise a GGUF file on CPU in float32; model and tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict[str, Any] = {}
    try:
        from transformers import GgufConfig

        kwargs["quantization_config"] = GgufConfig(dequantize=True)
    except ImportError:  # older transformers always dequantise
        pass
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32, **kwargs
    )
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # The weights are now plain float32 tensors: drop every trace of the GGUF quantizer so
    # save_pretrained writes (and from_pretrained later reads) an ordinary checkpoint.
    model.hf_quantizer = None
    if hasattr(model, "is_quantized"):
        model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if tokenizer.eos_token_id is not None and model.generation_config.eos_token_id is None:
        model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model, tokenizer


def convert_gguf(
    gguf: Path | Callable[[], Path],
    target: Path,
    *,
    source_id: str,
    name: str,
    extra: dict[str, Any] | None = None,
    progress: bool = False,
    after: Callable[[], None] | None = None,
) -> Path:
    """Make ``target`` a ready safetensors cache of ``gguf``; return ``target``.

    ``gguf`` may be a callable producing the file (e.g. assembling it), so that step also runs
    under the lock and only when the cache is not ready. ``after`` runs once the cache is in
    place (e.g. deleting an assembled GGUF).
    """
    from importlib.metadata import version

    from filelock import FileLock

    target = Path(target)
    if cache_state(target, source_id) == "ready":  # fast path, also for read-only caches
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if cache_state(target, source_id) == "ready":
            return target
        for stale in target.parent.glob(f".{target.name}.*.tmp"):  # left by a killed writer
            shutil.rmtree(stale, ignore_errors=True)
        path = gguf() if callable(gguf) else Path(gguf)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
        try:
            with step(progress, "Converting the model (one time, about a minute)"):
                try:
                    model, tokenizer = _load_gguf(path)
                except (OSError, ValueError, KeyError, RuntimeError) as exc:
                    reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                    raise ModelError(f"cannot load GGUF file {path}: {reason}") from exc
                model.save_pretrained(tmp)
                tokenizer.save_pretrained(tmp)
                del model
            manifest = {
                "format": FORMAT,
                "name": name,
                "source": source_id,
                "gguf": str(path),
                "transformers": version("transformers"),
                "torch": version("torch"),
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "files": sorted(p.name for p in tmp.iterdir() if p.is_file()),
                **(extra or {}),
            }
            umask = os.umask(0)
            os.umask(umask)
            tmp.chmod(0o777 & ~umask)  # mkdtemp makes it private; the cache is not secret
            for file in tmp.iterdir():
                file.chmod(0o666 & ~umask)
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if after is not None:
            after()
    return target
