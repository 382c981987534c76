"""The undo journal: what every writing run changed, so ``adapld undo`` can put it back.

Contract:
- One *run* per ``adapld`` invocation that writes files. ``Journal().begin(instruction)``
  returns a :class:`Run` and touches no disk; the run's folder appears with its first
  :meth:`Run.record`, so runs that write nothing leave no entry.
- :meth:`Run.record` stores the file's original bytes (``None``: the file did not exist,
  e.g. a new ``-o`` target) and the sha256 of the bytes about to be written, under the
  absolute path. It must run **after** the race check and **before** the replacement (it is
  the ``before_replace`` hook of :func:`~adapld_cli.edit.files.source.atomic_write`), so a crash
  right after the write still has the original. :meth:`Run.write` /
  :meth:`Run.write_output` do the whole sequence in one call. A failure to journal raises
  :class:`~adapld_cli.edit.errors.JournalError` (exit 2) and nothing is written.
- :meth:`Journal.list_runs` lists runs newest first, numbered from 1 (the ``N`` of
  ``adapld undo N``). :meth:`Journal.undo` restores one run's files — only those that still
  hold exactly the bytes adapld wrote; the rest are reported and left alone — through
  :func:`~adapld_cli.edit.files.source.atomic_write` (owner, mode and hard links kept; a file
  modified during the undo is not overwritten). It works from any directory (paths are
  absolute). A run that was undone is marked so; ``undo()`` without ``n`` takes the newest
  run not yet undone.
- Bounded: at most ``max_runs`` runs (20) and ``max_bytes`` (200 MB) of stored originals;
  the oldest runs are dropped first (the run being recorded is never dropped).
- Layout under :func:`journal_dir` (``$ADAPLD_JOURNAL``, else ``<cache_dir>/journal``:
  ``$ADAPLD_HOME/journal`` or ``~/.cache/adapld/journal``)::

      journal.lock                 # filelock: one process changes the journal at a time
      runs/<id>/run.json           # time, cwd, instruction, files, undone
      runs/<id>/<sha256>.orig      # the original bytes, by content

Exit codes for the CLI: :attr:`UndoReport.exit_code` (0: every file restored or already
original; 1: some left alone); :class:`~adapld_cli.edit.errors.UndoError` (exit 2): empty
journal, no such run, nothing left to undo.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from adapld_cli.edit.errors import (
    ChangedOnDiskError,
    EditError,
    JournalError,
    ReadOnlyError,
    UndoError,
)
from adapld_cli.edit.files.source import (
    Snapshot,
    SourceFile,
    atomic_write,
    check_unchanged,
    check_writable,
    read_snapshot,
    sha256,
    write_source,
)
from adapld_cli.model.paths import cache_dir

MAX_RUNS = 20
MAX_BYTES = 200_000_000
LOCK_TIMEOUT_S = 30.0
_FORMAT = 1


ENV_JOURNAL = "ADAPLD_JOURNAL"


def journal_dir() -> Path:
    """Where the undo journal lives (not created here): ``$ADAPLD_JOURNAL`` if set, else
    ``<cache_dir>/journal``. The test suite sets it per test, so its edits never push a
    user's own runs out of the journal (it keeps the last :data:`MAX_RUNS`)."""
    own = os.environ.get(ENV_JOURNAL)
    return Path(own).expanduser() if own else cache_dir() / "journal"


@dataclass(frozen=True)
class JournalFile:
    """One file of a run.

    Attributes:
        path: absolute path as the user named it (symlinks not resolved).
        original_sha256: hash of the bytes before the run; ``None`` if the file did not exist.
        written_sha256: hash of the bytes the run wrote.
        original_size: length of the original bytes (0 for a new file).
    """

    path: str
    original_sha256: str | None
    written_sha256: str
    original_size: int

    def to_json(self) -> dict:
        return {
            "path": self.path,
            "original_sha256": self.original_sha256,
            "written_sha256": self.written_sha256,
            "original_size": self.original_size,
        }

    @classmethod
    def from_json(cls, obj: dict) -> JournalFile:
        return cls(
            str(obj["path"]),
            obj.get("original_sha256"),
            str(obj["written_sha256"]),
            int(obj.get("original_size", 0)),
        )


@dataclass(frozen=True)
class RunInfo:
    """A run as stored, for listing and undo.

    Attributes:
        number: 1 for the newest run, 2 for the one before... (``adapld undo N``).
        id: the run's folder name (sortable: begin time in ns, then pid).
        time: when the run began (aware, UTC).
        cwd: the directory it ran in.
        instruction: the instruction it was given.
        files: the files it wrote, in order.
        undone: ``None``, or a short summary of the undo (``"2 restored, 1 left alone"``).
    """

    number: int
    id: str
    time: datetime
    cwd: str
    instruction: str
    files: tuple[JournalFile, ...]
    undone: str | None = None

    def to_json(self) -> dict:
        return {
            "number": self.number,
            "id": self.id,
            "time": self.time.isoformat(),
            "cwd": self.cwd,
            "instruction": self.instruction,
            "files": [f.path for f in self.files],
            "undone": self.undone,
        }


@dataclass(frozen=True)
class FileOutcome:
    """What undo did with one file.

    ``status`` is one of ``restored`` (original bytes back), ``removed`` (adapld had created
    the file), ``already`` (it already holds the original), or — left alone —
    ``changed`` (it no longer holds what adapld wrote), ``missing``, ``read-only``,
    ``failed`` (journal copy damaged, or the write failed; ``detail`` says why).
    """

    path: str
    status: str
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status in ("restored", "removed", "already")


@dataclass(frozen=True)
class UndoReport:
    """The result of :meth:`Journal.undo`: the run and one outcome per file."""

    run: RunInfo
    outcomes: tuple[FileOutcome, ...]

    @property
    def restored(self) -> int:
        return sum(o.ok for o in self.outcomes)

    @property
    def left_alone(self) -> int:
        return sum(not o.ok for o in self.outcomes)

    @property
    def exit_code(self) -> int:
        """0 when every file holds its original again, 1 when some were left alone."""
        return 0 if self.left_alone == 0 else 1

    def summary(self) -> str:
        """``2 restored, 1 already as before, 1 left alone`` (zero counts omitted)."""
        already = sum(o.status == "already" for o in self.outcomes)
        parts = [
            (self.restored - already, "restored"),
            (already, "already as before"),
            (self.left_alone, "left alone"),
        ]
        return ", ".join(f"{n} {what}" for n, what in parts if n) or "nothing to restore"


class Journal:
    """The undo journal under ``root`` (default :func:`journal_dir`)."""

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        max_runs: int = MAX_RUNS,
        max_bytes: int = MAX_BYTES,
        lock_timeout: float = LOCK_TIMEOUT_S,
    ) -> None:
        self.root = Path(root) if root is not None else journal_dir()
        self.max_runs = max_runs
        self.max_bytes = max_bytes
        self.lock_timeout = lock_timeout

    @property
    def runs_dir(self) -> Path:
        return self.root / "runs"

    def begin(self, instruction: str, cwd: str | None = None) -> Run:
        """A new run (nothing on disk until its first :meth:`Run.record`)."""
        run_id = f"{time.time_ns():020d}-{os.getpid()}"
        return Run(self, run_id, instruction, cwd if cwd is not None else os.getcwd())

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the journal's lock (creates the folder). Raises OSError / filelock.Timeout."""
        from filelock import FileLock

        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)  # copies of user code
        with FileLock(str(self.root / "journal.lock"), timeout=self.lock_timeout):
            yield

    def list_runs(self) -> list[RunInfo]:
        """Stored runs, newest first, numbered from 1. Unreadable entries are skipped."""
        if not self.runs_dir.is_dir():
            return []
        with self.locked():
            return self._list_unlocked()

    def undo(self, n: int | None = None, *, force: bool = False) -> UndoReport:
        """Restore run ``n`` (as numbered by :meth:`list_runs`; default: newest not undone).

        Each file is restored only if it still holds exactly what the run wrote; a file the
        run created is removed. Read-only files are left alone unless ``force``. Raises
        :class:`UndoError` (exit 2) when the journal is empty, ``n`` names no run, or every
        run is already undone. The run is then marked undone (``undo(n)`` may retry it).
        """
        if not self.runs_dir.is_dir():
            raise UndoError("the undo journal is empty: adapld has not written any file yet")
        with self.locked():
            runs = self._list_unlocked()
            info = _pick(runs, n)
            outcomes = tuple(self._undo_file(info, f, force) for f in _unique(info.files))
            report = UndoReport(info, outcomes)
            self._mark_undone(info, report.summary())
        return report

    # -- storage --------------------------------------------------------------------------
    def _list_unlocked(self) -> list[RunInfo]:
        infos = []
        for folder in sorted(self._run_folders(), reverse=True):
            data = _load(folder / "run.json")
            if data is None:
                continue
            with contextlib.suppress(KeyError, TypeError, ValueError):
                infos.append(_info(len(infos) + 1, folder.name, data))
        return infos

    def _run_folders(self) -> list[Path]:
        try:
            return [p for p in self.runs_dir.iterdir() if p.is_dir() and not p.name.startswith(".")]
        except OSError:
            return []

    def _prune(self, keep: str) -> None:
        """Drop the oldest runs (never ``keep``) until within ``max_runs`` and ``max_bytes``."""
        folders = sorted(self._run_folders(), key=lambda p: p.name)
        sizes = {p.name: _folder_size(p) for p in folders}
        total = sum(sizes.values())
        for folder in folders:
            if len(folders) <= self.max_runs and total <= self.max_bytes:
                break
            if folder.name == keep:
                continue
            shutil.rmtree(folder, ignore_errors=True)
            folders = [p for p in folders if p != folder]
            total -= sizes[folder.name]

    def _undo_file(self, info: RunInfo, jf: JournalFile, force: bool) -> FileOutcome:
        try:
            return self._restore(info, jf, force)
        except ChangedOnDiskError:
            return FileOutcome(jf.path, "changed", "changed on disk during the undo")
        except ReadOnlyError:
            return FileOutcome(jf.path, "read-only", "read-only now (--force restores it)")
        except EditError as exc:
            return FileOutcome(jf.path, "failed", _strip(str(exc), jf.path))
        except OSError as exc:
            return FileOutcome(jf.path, "failed", exc.strerror or str(exc))

    def _restore(self, info: RunInfo, jf: JournalFile, force: bool) -> FileOutcome:
        current = read_snapshot(jf.path)
        if current is None:
            if jf.original_sha256 is None:
                return FileOutcome(jf.path, "already", "gone, as before the run")
            return FileOutcome(jf.path, "missing", "no longer exists")
        _, snap = current
        digest = snap.sha256
        if digest == jf.original_sha256:
            return FileOutcome(jf.path, "already", "already holds the original")
        if digest != jf.written_sha256:
            return FileOutcome(jf.path, "changed", "changed since adapld wrote it")
        check_writable(jf.path, jf.path, force=force)
        if jf.original_sha256 is None:
            check_unchanged(jf.path, snap, jf.path)
            os.unlink(jf.path)
            return FileOutcome(jf.path, "removed", "adapld had created it")
        original = self._blob(info.id, jf.original_sha256)
        if original is None:
            return FileOutcome(jf.path, "failed", "the journal's copy is missing or damaged")
        atomic_write(jf.path, original, expect=snap, name=jf.path)
        return FileOutcome(jf.path, "restored")

    def _blob(self, run_id: str, digest: str) -> bytes | None:
        try:
            data = (self.runs_dir / run_id / f"{digest}.orig").read_bytes()
        except OSError:
            return None
        return data if sha256(data) == digest else None

    def _mark_undone(self, info: RunInfo, summary: str) -> None:
        path = self.runs_dir / info.id / "run.json"
        data = _load(path)
        if data is None:
            return
        data["undone"] = {"time": _now_iso(), "summary": summary}
        with contextlib.suppress(OSError):
            _dump(path, data)


class Run:
    """One writing run; create with :meth:`Journal.begin`."""

    def __init__(self, journal: Journal, run_id: str, instruction: str, cwd: str) -> None:
        self.journal = journal
        self.id = run_id
        self.instruction = instruction
        self.cwd = cwd
        self.time = _now_iso()
        self.files: list[JournalFile] = []

    @property
    def folder(self) -> Path:
        return self.journal.runs_dir / self.id

    def record(self, path: str | os.PathLike[str], original: bytes | None, written: bytes) -> None:
        """Journal ``path``'s ``original`` bytes (``None``: it did not exist) and ``written``.

        Call just before replacing the file (after the race check). Recording the same path
        again in this run keeps the first original and updates what was written. Raises
        :class:`JournalError` (exit 2) if the journal cannot be written: do not write then.
        """
        entry = JournalFile(
            _absolute(path),
            None if original is None else sha256(original),
            sha256(written),
            0 if original is None else len(original),
        )
        previous = self._find(entry.path)
        if previous is not None:
            entry = JournalFile(
                entry.path, previous.original_sha256, entry.written_sha256, previous.original_size
            )
        try:
            with self.journal.locked():
                self._store(entry, original if previous is None else None)
                self.journal._prune(keep=self.id)
        except Exception as exc:
            self._set(previous, entry.path)
            raise JournalError(
                f"{path}: cannot record the original for adapld undo in {self.journal.root} "
                f"({_reason(exc)}); nothing written"
            ) from None

    def forget(self, path: str | os.PathLike[str]) -> None:
        """Drop ``path`` from this run (recorded, but its write did not happen). Best effort."""
        absolute = _absolute(path)
        if self._find(absolute) is not None:
            self._rollback(None, absolute)

    def restore(self, path: str | os.PathLike[str]) -> Snapshot | None:
        """Put back what ``path`` held before this run wrote it (its tests failed), and drop
        it from the run: the file is as if never written. Only while it still holds exactly
        what this run wrote: else :class:`ChangedOnDiskError` (exit 1) and it is left alone.
        Raises :class:`JournalError` when the journal's copy is missing or damaged. Returns
        the restored file's snapshot (a new one: the bytes are the original's, not its
        inode and mtime), ``None`` for a file this run had created (removed)."""
        absolute = _absolute(path)
        entry = self._find(absolute)
        if entry is None:
            raise JournalError(f"{path}: nothing this run wrote there to put back")
        current = read_snapshot(absolute)
        digest = current[1].sha256 if current is not None else None
        if digest != entry.written_sha256:
            raise ChangedOnDiskError(f"{path}: changed since adapld wrote it; left as it is")
        assert current is not None
        if entry.original_sha256 is None:  # a new -o target: remove it
            check_unchanged(absolute, current[1], str(path))
            os.unlink(absolute)
        else:
            original = self.journal._blob(self.id, entry.original_sha256)
            if original is None:
                raise JournalError(f"{path}: the journal's copy of the original is damaged")
            atomic_write(absolute, original, expect=current[1], name=str(path))
        self.forget(absolute)
        restored = read_snapshot(absolute)
        return restored[1] if restored is not None else None

    def write(self, src: SourceFile, data: bytes, *, force: bool = False) -> None:
        """Write ``data`` over ``src``'s file, journalled: the in-place edit's one call.

        :func:`~adapld_cli.edit.files.source.write_source` (read-only check unless ``force``, race
        check against ``src.snapshot``, identity kept) with :meth:`record` as its
        ``before_replace`` hook. Raises what they raise (``ReadOnlyError`` /
        ``SpecialFileError`` / ``InputError`` exit 2, ``ChangedOnDiskError`` exit 1,
        ``JournalError`` exit 2, ``OSError``); in every such case the file is untouched and
        the journal keeps no entry for this write.
        """
        if src.path is None:
            raise JournalError(f"{src.name}: read from stdin; there is no file to write")
        self._guarded(
            src.path,
            src.raw,
            data,
            lambda hook: write_source(src, data, force=force, before_replace=hook),
        )

    def write_output(
        self, path: str | os.PathLike[str], data: bytes, *, mode: int | None = None
    ) -> None:
        """Write ``data`` to ``path`` (the ``-o`` target), journalled.

        An existing target is read first (a FIFO or device raises ``SpecialFileError``, exit
        2), its bytes are journalled and it must not change before the replacement
        (``ChangedOnDiskError``, exit 1); a new target is journalled as created, so undo
        removes it. ``mode`` as in :func:`~adapld_cli.edit.files.source.atomic_write`.
        """
        existing = read_snapshot(path)
        original, snap = existing if existing is not None else (None, None)
        self._guarded(
            path,
            original,
            data,
            lambda hook: atomic_write(path, data, mode=mode, expect=snap, before_replace=hook),
        )

    # -- internals ------------------------------------------------------------------------
    def _guarded(
        self,
        path: str | os.PathLike[str],
        original: bytes | None,
        data: bytes,
        do_write: Callable[[Callable[[], None]], None],
    ) -> None:
        """Run ``do_write(hook)``; ``hook`` records; a failure after recording un-records."""
        absolute = _absolute(path)
        previous = self._find(absolute)
        recorded = False

        def hook() -> None:
            nonlocal recorded
            self.record(path, original, data)
            recorded = True

        try:
            do_write(hook)
        except BaseException:
            if recorded:
                self._rollback(previous, absolute)
            raise

    def _rollback(self, previous: JournalFile | None, absolute: str) -> None:
        """Undo a :meth:`record` whose write did not happen (best effort)."""
        self._set(previous, absolute)
        with contextlib.suppress(Exception), self.journal.locked():
            if self.files:
                self._dump_run()
            else:
                shutil.rmtree(self.folder, ignore_errors=True)

    def _find(self, absolute: str) -> JournalFile | None:
        return next((f for f in self.files if f.path == absolute), None)

    def _set(self, entry: JournalFile | None, absolute: str) -> None:
        """Put back ``entry`` for ``absolute`` (``None``: remove it) in memory."""
        rest = [f for f in self.files if f.path != absolute]
        self.files = rest if entry is None else [*rest, entry]

    def _store(self, entry: JournalFile, original: bytes | None) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        if original is not None and entry.original_sha256 is not None:
            blob = self.folder / f"{entry.original_sha256}.orig"
            if not blob.exists():
                atomic_write(blob, original, mode=0o600)
        self._set(entry, entry.path)
        self._dump_run()

    def _dump_run(self) -> None:
        if not self.folder.is_dir():
            return
        _dump(
            self.folder / "run.json",
            {
                "format": _FORMAT,
                "id": self.id,
                "time": self.time,
                "cwd": self.cwd,
                "instruction": self.instruction,
                "files": [f.to_json() for f in self.files],
                "undone": None,
            },
        )


# -- helpers -------------------------------------------------------------------------------
def _pick(runs: list[RunInfo], n: int | None) -> RunInfo:
    if not runs:
        raise UndoError("the undo journal is empty: adapld has not written any file yet")
    if n is None:
        for info in runs:
            if info.undone is None:
                return info
        raise UndoError(
            "nothing left to undo: every run in the journal is undone already "
            "(see adapld undo --list)"
        )
    if not 1 <= n <= len(runs):
        held = f"{len(runs)} run" + ("s" if len(runs) != 1 else "")
        raise UndoError(f"no run {n}: the journal holds {held} (see adapld undo --list)")
    return runs[n - 1]


def _unique(files: tuple[JournalFile, ...]) -> list[JournalFile]:
    seen: dict[str, JournalFile] = {}
    for f in files:
        seen.setdefault(f.path, f)
    return list(seen.values())


def _info(number: int, run_id: str, data: dict) -> RunInfo:
    undone = data.get("undone")
    return RunInfo(
        number=number,
        id=run_id,
        time=datetime.fromisoformat(str(data["time"])),
        cwd=str(data.get("cwd", "")),
        instruction=str(data.get("instruction", "")),
        files=tuple(JournalFile.from_json(f) for f in data["files"]),
        undone=None if not undone else str(undone.get("summary", "undone")),
    )


def _absolute(path: str | os.PathLike[str]) -> str:
    return os.path.abspath(os.fspath(path))


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _load(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _dump(path: Path, data: dict) -> None:
    """Write JSON atomically (temp file + rename)."""
    fd, tmp = tempfile.mkstemp(prefix=".run.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1, ensure_ascii=False)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _folder_size(folder: Path) -> int:
    total = 0
    with contextlib.suppress(OSError):
        for p in folder.iterdir():
            with contextlib.suppress(OSError):
                st = p.lstat()
                if stat.S_ISREG(st.st_mode):
                    total += st.st_size
    return total


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    if type(exc).__name__ == "Timeout":
        return "the journal is locked by another adapld"
    return str(exc) or type(exc).__name__


def _strip(message: str, path: str) -> str:
    prefix = f"{path}: "
    return message[len(prefix) :] if message.startswith(prefix) else message


__all__ = [
    "MAX_BYTES",
    "MAX_RUNS",
    "FileOutcome",
    "Journal",
    "JournalFile",
    "Run",
    "RunInfo",
    "UndoReport",
    "journal_dir",
]
