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
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from adapld_cli.edit.errors import InputError

_BOM = b"\xef\xbb\xbf"


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
    """

    name: str
    path: Path | None
    raw: bytes
    text: str
    encoding: str = "utf-8"
    newline: str = "\n"

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
    """Read and decode one file from disk (see :func:`decode_source`)."""
    p = Path(path)
    shown = name if name is not None else str(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{shown}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{shown}: is a directory (pass files)") from None
    except PermissionError:
        raise InputError(f"{shown}: permission denied") from None
    except OSError as exc:
        raise InputError(f"{shown}: cannot read ({exc.strerror or exc})") from None
    return decode_source(raw, shown, p)


def encode_like(text: str, like: SourceFile) -> bytes:
    """Encode ``text`` (``\\n`` line endings) the way ``like`` was encoded on disk."""
    if like.newline != "\n":
        text = text.replace("\n", like.newline)
    return text.encode(like.encoding)


def check_writable(path: str | os.PathLike[str], name: str | None = None) -> None:
    """Raise :class:`InputError` early when :func:`atomic_write` to ``path`` would fail."""
    target = Path(os.path.realpath(path))
    shown = name if name is not None else str(path)
    folder = target.parent
    if not folder.is_dir():
        raise InputError(f"{shown}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"{shown}: cannot write in {folder} (permission denied)")
    if target.is_dir():
        raise InputError(f"{shown}: is a directory")


def atomic_write(path: str | os.PathLike[str], data: bytes, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` atomically.

    Mode bits come from ``mode`` if given, else from the existing file, else the umask default.
    """
    target = Path(os.path.realpath(path))
    if mode is None:
        try:
            mode = stat.S_IMODE(target.stat().st_mode)
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".adapld-tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(target.parent)


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
