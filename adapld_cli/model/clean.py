"""Find and remove converted caches nothing will load again.

Contract: :func:`obsolete_caches` lists entries of ``<cache_dir>/models`` that are obsolete:

- a cache of an embedded model that this version no longer ships, or of one it ships but in
  an older cache format or from other bytes (its manifest's ``source`` starts with
  ``embedded:``, or it is a pre-named ``embedded-…`` folder);
- with ``only_embedded=False`` also a cache of a ``.gguf`` file that is gone or changed
  (size or mtime differ from its manifest's source id), a cache in an older format, a folder
  without a manifest (a conversion killed before it finished), and a lock file whose folder
  is gone.

A folder whose ``<folder>.lock`` another process holds is in use and never listed.
:func:`remove_obsolete` deletes what :func:`obsolete_caches` lists and returns it with the bytes
freed. Current caches are never touched.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from adapld_cli.model.convert import FORMAT, read_manifest


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _gguf_source_present(source: str) -> bool:
    """Whether the GGUF a ``gguf:<path>:<size>:<mtime_ns>`` source id names is unchanged."""
    try:
        path, size, mtime = source.removeprefix("gguf:").rsplit(":", 2)
        st = Path(path).stat()
    except (ValueError, OSError):
        return False
    return str(st.st_size) == size and str(st.st_mtime_ns) == mtime


def _is_obsolete(folder: Path, current: dict[str, str], only_embedded: bool) -> bool:
    manifest = read_manifest(folder)
    source = str((manifest or {}).get("source", ""))
    embedded = source.startswith("embedded:") or folder.name.startswith("embedded-")
    if folder.name in current:
        return manifest is not None and (
            source != current[folder.name] or manifest.get("format") != FORMAT
        )
    if embedded:
        return True
    if only_embedded:
        return False
    if manifest is None or manifest.get("format") != FORMAT:
        return True
    return source.startswith("gguf:") and not _gguf_source_present(source)


def in_use(folder: Path) -> bool:
    """Whether another process holds ``<folder>.lock`` (converting or assembling now)."""
    from filelock import FileLock, Timeout

    path = Path(str(folder) + ".lock")
    if not path.exists():  # nobody ever locked it: do not create the lock file here
        return False
    lock = FileLock(str(path), timeout=0)
    try:
        with lock:
            return False
    except Timeout:
        return True


def obsolete_caches(
    models: Path, current: dict[str, str], *, only_embedded: bool = False
) -> list[Path]:
    """Obsolete entries of the folder ``models``; ``current`` maps live cache names to sources."""
    if not models.is_dir():
        return []
    found = []
    for entry in sorted(models.iterdir()):
        if entry.is_dir() and not entry.name.startswith("."):
            if _is_obsolete(entry, current, only_embedded) and not in_use(entry):
                found.append(entry)
        elif (
            entry.name.endswith(".lock")
            and not only_embedded
            and not (models / entry.name.removesuffix(".lock")).exists()
        ):
            found.append(entry)
    return found


def remove_obsolete(
    models: Path, current: dict[str, str], *, only_embedded: bool = False, dry_run: bool = False
) -> list[tuple[Path, int]]:
    """Delete what :func:`obsolete_caches` lists (unless ``dry_run``); return (path, bytes)."""
    removed = []
    for entry in obsolete_caches(models, current, only_embedded=only_embedded):
        size = _size(entry)
        if not dry_run:
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
                Path(str(entry) + ".lock").unlink(missing_ok=True)
            else:
                entry.unlink(missing_ok=True)
        removed.append((entry, size))
    return removed
