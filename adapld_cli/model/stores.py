"""Models already on disk in other tools' stores: Ollama, LM Studio, the Hugging Face cache.

Contract:
- :func:`find` turns a store reference into the GGUF file it names, reading files only
  (never the network), or returns ``None`` when ``spec`` is not a store reference:

  - ``ollama:NAME[:TAG]`` (tag ``latest`` by default; ``NAME`` may be ``user/model`` or
    ``host/user/model``): the manifest under ``$OLLAMA_MODELS``, ``~/.ollama/models`` or
    ``/usr/share/ollama/.ollama/models``, and the blob of its model layer (a GGUF);
  - ``lmstudio:PUBLISHER/REPO[/FILE.gguf]``: a folder of ``~/.lmstudio/models`` (or
    ``~/.cache/lm-studio/models``) holding one GGUF, or the file named;
  - ``ORG/NAME:QUANT`` (``Qwen/Qwen2.5-Coder-7B-Instruct-GGUF:q4_k_m``): the GGUF of a hub
    repository in the local Hugging Face cache (``$HF_HUB_CACHE``, ``$HF_HOME/hub``,
    ``~/.cache/huggingface/hub``) whose file name holds ``QUANT`` (case-insensitive).

  A reference not found raises :class:`~adapld_cli.model.errors.ModelError` (one line) with
  the nearest names the store holds.
- :func:`listing` lists every GGUF of those stores as :class:`StoredModel` (the ``--model``
  string that loads it, its file and size), for ``adapld model list``.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from adapld_cli.model.errors import ModelError

OLLAMA_HOST, OLLAMA_NAMESPACE = "registry.ollama.ai", "library"
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
PREFIXES = ("ollama:", "lmstudio:")


@dataclass(frozen=True)
class StoredModel:
    """A GGUF found in a store: the ``--model`` string that loads it, the store, the file."""

    spec: str
    store: str  # "ollama" | "lmstudio" | "huggingface"
    path: Path

    @property
    def size(self) -> int:
        return self.path.stat().st_size


def find(spec: str) -> Path | None:
    """The GGUF a store reference names (module contract); ``None``: not a store reference."""
    if spec.startswith("ollama:"):
        return _ollama(spec.removeprefix("ollama:"))
    if spec.startswith("lmstudio:"):
        return _lmstudio(spec.removeprefix("lmstudio:"))
    if _is_hub_quant(spec):
        return _hub_gguf(spec)
    return None


def listing() -> list[StoredModel]:
    """Every GGUF of the stores found here, by store then name."""
    return [*_ollama_models(), *_lmstudio_models(), *_hub_models()]


# -- Ollama ------------------------------------------------------------------------------------
def ollama_roots() -> list[Path]:
    env = os.environ.get("OLLAMA_MODELS")
    roots = [Path(env)] if env else []
    roots += [Path.home() / ".ollama" / "models", Path("/usr/share/ollama/.ollama/models")]
    return [r for r in roots if (r / "manifests").is_dir()]


def _ollama(ref: str) -> Path:
    name, _, tag = ref.partition(":")
    parts = name.strip("/").split("/")
    if not name or len(parts) > 3:
        raise ModelError(f"--model ollama:{ref}: expected ollama:NAME[:TAG]")
    host, namespace = OLLAMA_HOST, OLLAMA_NAMESPACE
    if len(parts) == 3:
        host, namespace = parts[0], parts[1]
    elif len(parts) == 2:
        namespace = parts[0]
    for root in ollama_roots():
        manifest = root / "manifests" / host / namespace / parts[-1] / (tag or "latest")
        if manifest.is_file():
            return _ollama_blob(root, manifest, ref)
    known = [m.spec.removeprefix("ollama:") for m in _ollama_models()]
    raise ModelError(f"--model ollama:{ref}: not in the Ollama store{_near(ref, known)}")


def _ollama_blob(root: Path, manifest: Path, ref: str) -> Path:
    try:
        layers = json.loads(manifest.read_text(encoding="utf-8")).get("layers") or []
    except (OSError, ValueError) as exc:
        raise ModelError(f"--model ollama:{ref}: unreadable manifest {manifest} ({exc})") from None
    for layer in layers:
        if layer.get("mediaType") == OLLAMA_MODEL_LAYER:
            digest = str(layer.get("digest", ""))
            for name in (digest.replace(":", "-"), digest):
                blob = root / "blobs" / name
                if blob.is_file():
                    return blob
            raise ModelError(f"--model ollama:{ref}: its model blob {digest} is missing")
    raise ModelError(f"--model ollama:{ref}: its manifest has no model layer")


def _ollama_models() -> Iterator[StoredModel]:
    for root in ollama_roots():
        base = root / "manifests"
        for manifest in sorted(p for p in base.glob("*/*/*/*") if p.is_file()):
            host, namespace, model, tag = manifest.relative_to(base).parts
            name = (
                model
                if (host, namespace) == (OLLAMA_HOST, OLLAMA_NAMESPACE)
                else (
                    f"{namespace}/{model}" if host == OLLAMA_HOST else f"{host}/{namespace}/{model}"
                )
            )
            try:
                blob = _ollama_blob(root, manifest, f"{name}:{tag}")
            except ModelError:
                continue
            yield StoredModel(f"ollama:{name}:{tag}", "ollama", blob)


# -- LM Studio ---------------------------------------------------------------------------------
def lmstudio_roots() -> list[Path]:
    home = Path.home()
    roots = [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]
    return [r for r in roots if r.is_dir()]


def _lmstudio(ref: str) -> Path:
    for root in lmstudio_roots():
        target = root / ref
        if target.is_file() and target.suffix.lower() == ".gguf":
            return target
        if target.is_dir():
            ggufs = _model_ggufs(target)
            if len(ggufs) == 1:
                return ggufs[0]
            if ggufs:
                names = ", ".join(g.name for g in ggufs)
                raise ModelError(f"--model lmstudio:{ref}: several GGUFs ({names}); name one")
    known = [m.spec.removeprefix("lmstudio:") for m in _lmstudio_models()]
    raise ModelError(f"--model lmstudio:{ref}: not in LM Studio's models{_near(ref, known)}")


def _lmstudio_models() -> Iterator[StoredModel]:
    for root in lmstudio_roots():
        for gguf in sorted(root.glob("*/*/*.gguf")):
            if gguf in _model_ggufs(gguf.parent):
                yield StoredModel(f"lmstudio:{gguf.relative_to(root).as_posix()}", "lmstudio", gguf)


# -- the Hugging Face cache --------------------------------------------------------------------
def hub_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def _is_hub_quant(spec: str) -> bool:
    repo, sep, quant = spec.partition(":")
    return bool(sep and quant) and repo.count("/") == 1 and not spec.startswith((".", "/", "~"))


def _hub_gguf(spec: str) -> Path:
    repo, _, quant = spec.partition(":")
    snapshots = hub_cache() / ("models--" + repo.replace("/", "--")) / "snapshots"
    found = [g for g in _snapshot_ggufs(snapshots) if quant.lower() in g.name.lower()]
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        names = ", ".join(g.name for g in found)
        raise ModelError(f"--model {spec}: several GGUFs match {quant} ({names})")
    known = [m.spec for m in _hub_models()]
    raise ModelError(
        f"--model {spec}: no GGUF matching {quant} in the Hugging Face cache{_near(spec, known)}"
    )


def _snapshot_ggufs(snapshots: Path) -> list[Path]:
    """The GGUFs of a repository's newest snapshot."""
    if not snapshots.is_dir():
        return []
    newest = max(snapshots.iterdir(), key=lambda p: p.stat().st_mtime, default=None)
    return _model_ggufs(newest) if newest is not None else []


def _hub_models() -> Iterator[StoredModel]:
    cache = hub_cache()
    if not cache.is_dir():
        return
    for repo in sorted(cache.glob("models--*")):
        name = repo.name.removeprefix("models--").replace("--", "/", 1)
        for gguf in _snapshot_ggufs(repo / "snapshots"):
            yield StoredModel(f"{name}:{_quant_of(gguf.name)}", "huggingface", gguf)


# -- helpers -----------------------------------------------------------------------------------
def _model_ggufs(folder: Path) -> list[Path]:
    """The model GGUFs of a folder (not a vision projector's ``mmproj`` file)."""
    return sorted(
        g for g in folder.glob("*.gguf") if g.is_file() and "mmproj" not in g.name.lower()
    )


def _quant_of(filename: str) -> str:
    """The quantisation tag of a GGUF's file name (``...-Q4_K_M.gguf`` -> ``Q4_K_M``), else
    the whole stem."""
    stem = filename.removesuffix(".gguf")
    tail = stem.replace(".", "-").split("-")[-1]
    return tail if tail[:1].upper() in {"Q", "F", "B", "I"} and len(tail) <= 8 else stem


def _near(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.4)
    return f" (did you mean {', '.join(close)}?)" if close else ""
