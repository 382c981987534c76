"""File reading, re-encoding and atomic writes (adapld_cli/edit/files/source.py)."""

from __future__ import annotations

import os
import stat

import pytest

from adapld_cli.edit import (
    InputError,
    atomic_write,
    check_writable,
    decode_source,
    encode_like,
    read_source,
)


def test_plain_utf8_roundtrip():
    src = decode_source("héllo\nwörld\n".encode(), "x.py")
    assert src.text == "héllo\nwörld\n"
    assert src.encoding == "utf-8" and src.newline == "\n" and src.trailing_newline
    assert encode_like(src.text, src) == src.raw


def test_bom_and_crlf_are_restored():
    raw = b"\xef\xbb\xbfa = 1\r\nb = 2\r\n"
    src = decode_source(raw, "x.py")
    assert src.text == "a = 1\nb = 2\n"
    assert src.encoding == "utf-8-sig" and src.newline == "\r\n"
    assert encode_like(src.text, src) == raw
    assert encode_like("a = 3\nb = 2\n", src) == b"\xef\xbb\xbfa = 3\r\nb = 2\r\n"


def test_no_trailing_newline_is_reported():
    src = decode_source(b"x = 1", "x.py")
    assert not src.trailing_newline


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (b"abc\x00def", "binary"),
        (b"ok\n\xff\xfe bad", "not UTF-8"),
        (b"\xff\xfea\x00b\x00", "UTF-16"),
        (b"line1\nline2 \xe9t\xe9\n", "line 2"),
    ],
)
def test_bad_bytes_are_input_errors(raw, needle):
    with pytest.raises(InputError) as info:
        decode_source(raw, "f.py")
    assert needle in str(info.value)
    assert info.value.exit_code == 2
    assert "\n" not in str(info.value)


def test_read_source_errors(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_source(tmp_path / "missing.py")
    with pytest.raises(InputError, match="is a directory"):
        read_source(tmp_path)


def test_atomic_write_keeps_mode_and_leaves_no_temp(tmp_path):
    path = tmp_path / "a.py"
    path.write_bytes(b"old\n")
    os.chmod(path, 0o640)
    atomic_write(path, b"new\n")
    assert path.read_bytes() == b"new\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.py"]


def test_atomic_write_follows_symlinks(tmp_path):
    real = tmp_path / "real.py"
    real.write_bytes(b"old\n")
    link = tmp_path / "link.py"
    link.symlink_to(real)
    atomic_write(link, b"new\n")
    assert link.is_symlink()
    assert real.read_bytes() == b"new\n"


def test_atomic_write_failure_keeps_old_file(tmp_path, monkeypatch):
    path = tmp_path / "a.py"
    path.write_bytes(b"old\n")

    def boom(*_a, **_k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write(path, b"new\n")
    assert path.read_bytes() == b"old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.py"]


def test_check_writable(tmp_path):
    check_writable(tmp_path / "new.py")
    with pytest.raises(InputError, match="does not exist"):
        check_writable(tmp_path / "nope" / "x.py")
