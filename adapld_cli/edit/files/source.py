"""Reading, re-encoding and atomically writing the files being edited.

Contract:
- :func:`read_source` / :func:`decode_source` turn bytes into a :class:`SourceFile` whose
  ``text`` is what the model sees: UTF-8 decoded, BOM removed, CRLF normalised to ``\\n``.
  Missing paths, directories, unreadable, binary (NUL bytes) and non-UTF-8 files raise
  :class:`~adapld_cli.edit.errors.InputError` (exit 2).
- :func:`encode_like` turns edited text back into bytes with the original's encoding (BOM
  kept) and line-ending style, so an untouched line stays byte-identical.
- :func:`atomic_write` writes through a temporary file in the target's folder (fsync, mode
  bits copied, ``os.replace``): readers see the old file or the new one, never a mix, and an
  interrupted run leaves the old file in place. Symlinks are followed (the link survives).

Safety (race-safe writes that keep the file's identity):
- :func:`read_source` never opens a FIFO, device or socket: it calls ``stat`` first and raises
  :class:`~adapld_cli.edit.errors.SpecialFileError` (exit 2), then opens non-blocking and
  checks the opened file again. It records a :class:`Snapshot` (size, mtime_ns, inode,
  device, sha256 of the bytes read) on ``SourceFile.snapshot``. ``/dev/stdin`` (and
  ``/dev/fd/0``, ``/proc/self/fd/0``) are read like ``-``: see :func:`is_stdin_path`.
- :func:`check_writable` (called before the model loads) also refuses special files and,
  unless ``force``, a file without write permission for its owner
  (:class:`~adapld_cli.edit.errors.ReadOnlyError`, exit 2; checked on the mode bits, so it
  holds for root too).
- :func:`atomic_write` with ``expect=snapshot`` re-checks the file just before replacing it
  (after the new bytes are safely in the temporary file) and raises
  :class:`~adapld_cli.edit.errors.ChangedOnDiskError` (``changed on disk during the edit;
  nothing written``, exit 1) if it differs in any of size, mtime_ns, inode, device or
  content hash. ``before_replace`` runs after that check and before the replacement: the
  place to journal the original bytes (see :mod:`adapld_cli.edit.files.journal`).
- Identity is kept: owner and group are copied onto the temporary file before the rename
  (works as root; best effort otherwise), mode bits are kept, and a file with more than one
  hard link is **written through its own inode** (the new bytes are first fsynced in the
  temporary file, which is removed only once the in-place write is fsynced), so every name
  keeps showing the same, new content. That write-through is not atomic for concurrent
  readers; the journal holds the original bytes for ``adapld undo``.
- :func:`write_source` is the one call for an in-place edit: all of the above for a
  :class:`SourceFile` read by :func:`read_source`. The check-then-replace window is a few
  system calls wide (no portable compare-and-swap on a path exists); a change inside it is
  not seen, but the undo journal still holds the original.
- :func:`unique_paths` drops later names of a file already given (same inode), so a file
  named twice in one run is edited once.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from adapld_cli.edit.errors import (
    ChangedOnDiskError,
    InputError,
    ReadOnlyError,
    SpecialFileError,
)

_BOM = b"\xef\xbb\xbf"
_STDIN_ALIASES = frozenset({"-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"})
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)


@dataclass(frozen=True)
class Snapshot:
    """What a file was when it was read: compared again just before it is replaced.

    Attributes:
        size: bytes on disk (``st_size``).
        mtime_ns: modification time in nanoseconds.
        inode: ``st_ino``; a different inode means the file was replaced by another one.
        device: ``st_dev``.
        sha256: hex digest of the bytes that were read.
    """

    size: int
    mtime_ns: int
    inode: int
    device: int
    sha256: str

    @classmethod
    def of(cls, st: os.stat_result, raw: bytes) -> Snapshot:
        """The snapshot of a file whose ``stat`` is ``st`` and whose bytes are ``raw``."""
        return cls(st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev, sha256(raw))

    def same_stat(self, st: os.stat_result) -> bool:
        """True when ``st`` agrees on size, mtime_ns, inode and device."""
        return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev) == (
            self.size,
            self.mtime_ns,
            self.inode,
            self.device,
        )


def sha256(data: bytes) -> str:
    """Hex sha256 of ``data`` (the hash used by snapshots and the undo journal)."""
    return hashlib.sha256(data).hexdigest()


def is_stdin_path(path: str | os.PathLike[str]) -> bool:
    """True for ``-`` and the paths that name standard input (``/dev/stdin``, ``/dev/fd/0``...).

    The CLI should treat such a path exactly like ``-`` (read stdin, write stdout).
    """
    return os.fspath(path) in _STDIN_ALIASES


def unique_paths(paths: list[str]) -> list[str]:
    """``paths`` without later names of a file already listed (first occurrence kept).

    Two names are the same file when they resolve to the same inode (``a.py``, ``./a.py``,
    a symlink or a hard link to it); paths that cannot be stat'ed are compared as absolute
    paths and stdin aliases as ``-``. The CLI edits each file once.
    """
    seen: set[object] = set()
    kept = []
    for p in paths:
        key = _identity(p)
        if key not in seen:
            seen.add(key)
            kept.append(p)
    return kept


def _identity(path: str) -> object:
    if is_stdin_path(path):
        return "-"
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return os.path.abspath(path)
    return (st.st_dev, st.st_ino)


@dataclass(frozen=True)
class SourceFile:
    """One input file, decoded.

    Attributes:
        name: what messages call it (the path as given, or ``<stdin>``).
        path: the file on disk; ``None`` for stdin.
        raw: the original bytes.
        text: decoded text with ``\\n`` line endings and no BOM (the model's view).
        encoding: ``"utf-8"`` or ``"utf-8-sig"`` (a BOM was present).
        newline: ``"\\n"`` or ``"\\r\\n"`` (the dominant style of the original).
        snapshot: what the file was when read (``None`` for stdin or bytes decoded directly);
            pass it to :func:`atomic_write` as ``expect`` (or use :func:`write_source`).
    """

    name: str
    path: Path | None
    raw: bytes
    text: str
    encoding: str = "utf-8"
    newline: str = "\n"
    snapshot: Snapshot | None = None

    @property
    def trailing_newline(self) -> bool:
        return self.text.endswith("\n")


def decode_source(raw: bytes, name: str, path: Path | None = None) -> SourceFile:
    """Decode ``raw`` as a UTF-8 text file; raise :class:`InputError` for anything else."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputError(f"{name}: UTF-16 text is not supported; convert the file to UTF-8")
    if b"\x00" in raw:
        raise InputError(f"{name}: binary file (contains NUL bytes), not edited")
    encoding = "utf-8"
    body = raw
    if raw.startswith(_BOM):
        encoding, body = "utf-8-sig", raw[len(_BOM) :]
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = exc.start + (len(raw) - len(body))
        line = raw[:offset].count(b"\n") + 1
        raise InputError(
            f"{name}: not UTF-8 text (byte 0x{raw[offset]:02x} on line {line}), not edited"
        ) from None
    crlf = text.count("\r\n")
    lf = text.count("\n") - crlf
    newline = "\r\n" if crlf > lf else "\n"
    if crlf:
        text = text.replace("\r\n", "\n")
    return SourceFile(name=name, path=path, raw=raw, text=text, encoding=encoding, newline=newline)


def read_source(path: str | os.PathLike[str], name: str | None = None) -> SourceFile:
    """Read and decode one file from disk (see :func:`decode_source`), remembering a snapshot.

    Raises :class:`InputError` (exit 2) for a missing path, a directory, an unreadable file,
    and :class:`SpecialFileError` (exit 2) for a FIFO, device or socket — detected with
    ``stat`` before any ``open``, so a FIFO never blocks. A stdin alias (:func:`is_stdin_path`)
    reads standard input and returns a ``SourceFile`` named ``<stdin>`` with no path.
    """
    shown = name if name is not None else str(path)
    if is_stdin_path(path):
        return decode_source(sys.stdin.buffer.read(), name or "<stdin>")
    p = Path(path)
    raw, st = _read_regular(p, shown)
    return replace(decode_source(raw, shown, p), snapshot=Snapshot.of(st, raw))


def read_snapshot(path: str | os.PathLike[str]) -> tuple[bytes, Snapshot] | None:
    """The bytes of an existing regular file and their :class:`Snapshot`; ``None`` if absent.

    Never opens a FIFO or device (:class:`SpecialFileError`); a directory or an unreadable
    file raises :class:`InputError`. Used for ``-o`` targets and by ``adapld undo``.
    """
    shown = str(path)
    try:
        os.stat(path)
    except FileNotFoundError:
        return None
    except OSError:
        pass  # _read_regular reports it
    raw, st = _read_regular(Path(path), shown)
    return raw, Snapshot.of(st, raw)


def _read_regular(path: Path, shown: str) -> tuple[bytes, os.stat_result]:
    """The bytes of a regular file and its ``fstat`` taken after reading them."""
    _require_regular(_stat(path, shown), shown)
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except PermissionError:
        raise InputError(f"{shown}: permission denied") from None
    except OSError as exc:
        raise InputError(f"{shown}: cannot read ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as fh:
        _require_regular(os.fstat(fh.fileno()), shown)  # swapped since the stat?
        try:
            raw = fh.read()
        except OSError as exc:
            raise InputError(f"{shown}: cannot read ({exc.strerror or exc})") from None
        return raw, os.fstat(fh.fileno())


def _stat(path: str | os.PathLike[str], shown: str) -> os.stat_result:
    """``os.stat`` (symlinks followed) with the read errors as :class:`InputError`."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{shown}: no such file") from None
    except PermissionError:
        raise InputError(f"{shown}: permission denied") from None
    except OSError as exc:
        raise InputError(f"{shown}: cannot read ({exc.strerror or exc})") from None


def _require_regular(st: os.stat_result, shown: str) -> None:
    """Raise unless ``st`` is a regular file (directories: InputError; others: Special)."""
    if stat.S_ISREG(st.st_mode):
        return
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{shown}: is a directory (pass files)")
    raise SpecialFileError(f"{shown}: is {_kind(st.st_mode)}, not a regular file; not edited")


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "not a regular file"


def encode_like(text: str, like: SourceFile) -> bytes:
    """Encode ``text`` (``\\n`` line endings) the way ``like`` was encoded on disk."""
    if like.newline != "\n":
        text = text.replace("\n", like.newline)
    return text.encode(like.encoding)


def check_writable(
    path: str | os.PathLike[str], name: str | None = None, *, force: bool = False
) -> None:
    """Raise early (before the model loads) when writing ``path`` would fail or is refused.

    - :class:`InputError`: the folder is missing or not writable, the path is a directory.
    - :class:`SpecialFileError`: the path is a FIFO, device or socket.
    - :class:`ReadOnlyError` (unless ``force``): the existing file has no write permission
      for its owner (``chmod 444``); judged on the mode bits, so root is refused too.

    A path that does not exist yet is fine (``-o new.py``). All exit 2.
    """
    target = Path(os.path.realpath(path))
    shown = name if name is not None else str(path)
    folder = target.parent
    if not folder.is_dir():
        raise InputError(f"{shown}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"{shown}: cannot write in {folder} (permission denied)")
    try:
        st = os.stat(target)
    except OSError:
        return
    _require_regular(st, shown)
    if not force and not st.st_mode & stat.S_IWUSR:
        raise ReadOnlyError(
            f"{shown}: read-only (mode {stat.S_IMODE(st.st_mode):04o}, no write permission "
            "for its owner); not edited (--force writes it anyway)"
        )


def check_unchanged(path: str | os.PathLike[str], expect: Snapshot, name: str) -> None:
    """Raise :class:`ChangedOnDiskError` unless ``path`` still matches ``expect``.

    Compares size, mtime_ns, inode and device, then re-reads the bytes and compares their
    sha256 (catches a same-size rewrite within the clock's granularity). A file that
    vanished, or became something other than a regular file, has changed too.
    """
    changed = ChangedOnDiskError(f"{name}: changed on disk during the edit; nothing written")
    try:
        st = os.stat(path)
    except OSError:
        raise changed from None
    if not stat.S_ISREG(st.st_mode) or not expect.same_stat(st):
        raise changed
    try:
        fd = os.open(path, _OPEN_FLAGS)
        with os.fdopen(fd, "rb") as fh:
            same = expect.same_stat(os.fstat(fh.fileno())) and sha256(fh.read()) == expect.sha256
    except OSError:
        raise changed from None
    if not same:
        raise changed


def write_source(
    src: SourceFile,
    data: bytes,
    *,
    force: bool = False,
    before_replace: Callable[[], None] | None = None,
) -> None:
    """Write ``data`` over the file ``src`` was read from: the in-place edit's one call.

    Checks, in order: writable and not read-only unless ``force`` (:func:`check_writable`:
    :class:`ReadOnlyError` / :class:`SpecialFileError` / :class:`InputError`, exit 2); then
    :func:`atomic_write` with ``expect=src.snapshot`` (:class:`ChangedOnDiskError`, exit 1,
    nothing written) and ``before_replace`` (journal the original there). ``OSError`` from
    the write itself propagates (the file is left as it was).
    """
    if src.path is None:
        raise InputError(f"{src.name}: read from stdin; there is no file to write")
    check_writable(src.path, src.name, force=force)
    atomic_write(src.path, data, expect=src.snapshot, name=src.name, before_replace=before_replace)


def atomic_write(
    path: str | os.PathLike[str],
    data: bytes,
    *,
    mode: int | None = None,
    expect: Snapshot | None = None,
    name: str | None = None,
    before_replace: Callable[[], None] | None = None,
) -> None:
    """Replace ``path`` with ``data``, keeping the file's identity.

    Steps: ``data`` goes to a temporary file in the target's folder (fsynced, owner/group
    and mode bits set); if ``expect`` is given the target is checked against it
    (:func:`check_unchanged`: :class:`ChangedOnDiskError`, nothing written); then
    ``before_replace()`` runs (an exception there also leaves the file untouched); then a
    file with one link is replaced by ``os.replace`` (atomic) and a file with several hard
    links is overwritten through its own inode (all names see the new content). Any
    failure removes the temporary file and leaves the old content in place (for the
    write-through: as far as the filesystem allows; space is reserved first).

    Mode bits come from ``mode`` if given, else from the existing file, else the umask
    default. Owner and group come from the existing file (always as root; otherwise the
    group where permitted). Symlinks are followed (the link survives).
    """
    target = Path(os.path.realpath(path))
    shown = name if name is not None else str(path)
    old = _existing(target, shown)
    if mode is None:
        mode = stat.S_IMODE(old.st_mode) if old is not None else _default_mode()
    tmp = _write_temp(target, data, mode, old)
    try:
        if expect is not None:
            check_unchanged(target, expect, shown)
        if before_replace is not None:
            before_replace()
        if old is not None and old.st_nlink > 1:
            _write_through(target, data, old, shown)
            os.unlink(tmp)
        else:
            os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(target.parent)


def _existing(target: Path, shown: str) -> os.stat_result | None:
    """The target's stat if it exists (must be a regular file), else ``None``."""
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return None
    _require_regular(st, shown)
    return st


def _default_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _write_temp(target: Path, data: bytes, mode: int, old: os.stat_result | None) -> str:
    """A fsynced temporary file next to ``target`` holding ``data``, owner and mode set."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".adapld-tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if old is not None:
                _copy_owner(fh.fileno(), old)
            os.fchmod(fh.fileno(), mode)  # after chown, which may clear set-id bits
            os.fsync(fh.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def _copy_owner(fd: int, old: os.stat_result) -> None:
    """Give the open file ``fd`` the owner and group of ``old`` (group only if not allowed)."""
    st = os.fstat(fd)
    if (st.st_uid, st.st_gid) == (old.st_uid, old.st_gid):
        return
    try:
        os.fchown(fd, old.st_uid, old.st_gid)
    except PermissionError:
        with contextlib.suppress(PermissionError):
            os.fchown(fd, -1, old.st_gid)


def _write_through(target: Path, data: bytes, old: os.stat_result, shown: str) -> None:
    """Overwrite ``target`` in place (same inode): how a hard-linked file stays linked.

    Space is reserved first; if writing fails midway, the bytes read just before are
    written back (best effort) and the error propagates.
    """
    fd = os.open(target, os.O_RDWR | getattr(os, "O_NOCTTY", 0))
    try:
        st = os.fstat(fd)
        if (st.st_ino, st.st_dev) != (old.st_ino, old.st_dev):
            raise ChangedOnDiskError(f"{shown}: changed on disk during the edit; nothing written")
        before = _pread_all(fd, st.st_size)
        _reserve(fd, len(data))
        try:
            _pwrite_all(fd, data)
        except BaseException:
            with contextlib.suppress(OSError):
                _pwrite_all(fd, before)
            raise
        os.fsync(fd)
    finally:
        os.close(fd)


def _pread_all(fd: int, size: int) -> bytes:
    chunks = []
    offset = 0
    while True:
        chunk = os.pread(fd, max(size - offset, 1 << 16), offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


def _pwrite_all(fd: int, data: bytes) -> None:
    """Make the open file hold exactly ``data``."""
    view = memoryview(data)
    offset = 0
    while offset < len(data):
        offset += os.pwrite(fd, view[offset:], offset)
    os.ftruncate(fd, len(data))


def _reserve(fd: int, size: int) -> None:
    """Allocate ``size`` bytes up front so a full disk fails before any byte changes."""
    if size == 0 or not hasattr(os, "posix_fallocate"):
        return
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise


def _fsync_dir(folder: Path) -> None:
    """Persist the rename itself (best effort; not every OS/filesystem allows it)."""
    try:
        dfd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)
