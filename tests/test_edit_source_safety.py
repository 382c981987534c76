"""Race-safe writes that keep the file's identity (adapld_cli/edit/files/source.py, issue 9).

Real files, real hard links, real FIFOs and sockets, a real chown (the tests run as root).
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading

import pytest

from adapld_cli.edit.errors import (
    ChangedOnDiskError,
    InputError,
    ReadOnlyError,
    SpecialFileError,
)
from adapld_cli.edit.files.source import (
    Snapshot,
    atomic_write,
    check_unchanged,
    check_writable,
    is_stdin_path,
    read_snapshot,
    read_source,
    sha256,
    unique_paths,
    write_source,
)

CHANGED = "changed on disk during the edit; nothing written"


def within(seconds: float, fn, *args, **kwargs):
    """Call ``fn`` in a daemon thread; fail (instead of hanging) if it blocks too long."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # handed back to the test
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{fn.__name__} blocked for more than {seconds}s"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def state(path):
    st = path.stat()
    return path.read_bytes(), st.st_mtime_ns, st.st_ino


def leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".adapld-tmp"))


@pytest.fixture
def py(tmp_path):
    path = tmp_path / "a.py"
    path.write_bytes(b"def f():\n    return 1\n")
    return path


# -- snapshots and the race check --------------------------------------------------------
def test_read_source_remembers_a_snapshot(py):
    src = read_source(py)
    st = py.stat()
    assert src.snapshot == Snapshot(
        st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev, sha256(py.read_bytes())
    )


def test_bom_crlf_snapshot_hashes_the_raw_bytes(tmp_path):
    path = tmp_path / "w.py"
    path.write_bytes(b"\xef\xbb\xbfa = 1\r\n")
    src = read_source(path)
    assert src.text == "a = 1\n"
    assert src.snapshot.sha256 == sha256(b"\xef\xbb\xbfa = 1\r\n")


def test_unchanged_file_is_written(py):
    src = read_source(py)
    write_source(src, b"def f():\n    return 2\n")
    assert py.read_bytes() == b"def f():\n    return 2\n"
    assert leftovers(py.parent) == []


def test_appended_during_the_edit_is_refused(py):
    src = read_source(py)
    with open(py, "ab") as fh:
        fh.write(b"# added meanwhile\n")
    before = state(py)
    with pytest.raises(ChangedOnDiskError) as info:
        write_source(src, b"new\n")
    assert str(info.value) == f"{py}: {CHANGED}"
    assert info.value.exit_code == 1
    assert state(py) == before
    assert leftovers(py.parent) == []


def test_same_size_same_mtime_rewrite_is_caught_by_the_hash(py):
    src = read_source(py)
    st = py.stat()
    py.write_bytes(b"def f():\n    return 9\n")  # same length
    os.utime(py, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert src.snapshot.same_stat(py.stat())
    with pytest.raises(ChangedOnDiskError):
        atomic_write(py, b"new\n", expect=src.snapshot)
    assert py.read_bytes() == b"def f():\n    return 9\n"


def test_replaced_by_another_file_is_refused(py, tmp_path):
    src = read_source(py)
    other = tmp_path / "other"
    other.write_bytes(py.read_bytes())  # same bytes, another inode (an editor's save)
    os.replace(other, py)
    with pytest.raises(ChangedOnDiskError):
        write_source(src, b"new\n")


def test_deleted_during_the_edit_is_refused(py):
    src = read_source(py)
    py.unlink()
    with pytest.raises(ChangedOnDiskError):
        write_source(src, b"new\n")
    assert not py.exists()


def test_before_replace_runs_after_the_check_and_can_veto(py):
    src = read_source(py)
    calls = []
    py.write_bytes(b"changed\n")
    with pytest.raises(ChangedOnDiskError):
        write_source(src, b"new\n", before_replace=lambda: calls.append(1))
    assert calls == []  # the race check comes first

    src = read_source(py)

    def veto():
        raise RuntimeError("journal full")

    with pytest.raises(RuntimeError):
        write_source(src, b"new\n", before_replace=veto)
    assert py.read_bytes() == b"changed\n"
    assert leftovers(py.parent) == []


def test_check_unchanged_through_a_symlink(py, tmp_path):
    link = tmp_path / "link.py"
    link.symlink_to(py)
    src = read_source(link)
    check_unchanged(link, src.snapshot, "link.py")
    write_source(src, b"new\n")
    assert link.is_symlink() and py.read_bytes() == b"new\n"


# -- identity ------------------------------------------------------------------------------
def test_hard_link_stays_linked(py, tmp_path):
    other = tmp_path / "other_name.py"
    os.link(py, other)
    inode = py.stat().st_ino
    os.chmod(py, 0o640)
    write_source(read_source(py), b"new content\n")
    assert py.read_bytes() == other.read_bytes() == b"new content\n"
    assert py.stat().st_ino == other.stat().st_ino == inode
    assert py.stat().st_nlink == 2
    assert stat.S_IMODE(py.stat().st_mode) == 0o640
    assert leftovers(tmp_path) == []


def test_hard_link_shrinking_and_race(py, tmp_path):
    os.link(py, tmp_path / "twin.py")
    src = read_source(py)
    write_source(src, b"x\n")  # shorter than before: truncated, no stale tail
    assert (tmp_path / "twin.py").read_bytes() == b"x\n"
    with open(tmp_path / "twin.py", "ab") as fh:  # changed through the other name
        fh.write(b"y\n")
    with pytest.raises(ChangedOnDiskError):
        write_source(src, b"z\n")
    assert py.read_bytes() == b"x\ny\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_owner_and_group_kept_as_root(py):
    os.chown(py, 1000, 1000)
    os.chmod(py, 0o664)
    write_source(read_source(py), b"new\n")
    st = py.stat()
    assert (st.st_uid, st.st_gid) == (1000, 1000)
    assert stat.S_IMODE(st.st_mode) == 0o664
    assert py.read_bytes() == b"new\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_owner_kept_for_output_target(tmp_path):
    target = tmp_path / "out.py"
    target.write_bytes(b"old\n")
    os.chown(target, 1000, 1001)
    atomic_write(target, b"new\n")
    assert (target.stat().st_uid, target.stat().st_gid) == (1000, 1001)


def test_read_only_refused_unless_force(py):
    os.chmod(py, 0o444)
    before = state(py)
    with pytest.raises(ReadOnlyError) as info:
        check_writable(py)
    assert info.value.exit_code == 2
    assert "read-only" in str(info.value) and "--force" in str(info.value)
    assert "\n" not in str(info.value)
    src = read_source(py)
    with pytest.raises(ReadOnlyError):
        write_source(src, b"new\n")
    assert state(py) == before
    write_source(src, b"new\n", force=True)
    assert py.read_bytes() == b"new\n"
    assert stat.S_IMODE(py.stat().st_mode) == 0o444


def test_owner_read_only_is_judged_on_mode_bits(py):
    os.chmod(py, 0o466)  # group and others may write, the owner may not
    with pytest.raises(ReadOnlyError):
        check_writable(py)
    check_writable(py, force=True)


def test_new_output_path_is_writable(tmp_path):
    new = tmp_path / "new.py"
    assert check_writable(new) is None  # `-o new.py`: a path that does not exist yet is fine
    assert check_writable(new, force=True) is None
    assert list(tmp_path.iterdir()) == []  # the check creates nothing
    folder = tmp_path / "no-such-folder"
    with pytest.raises(InputError) as info:  # ... but its folder must exist
        check_writable(folder / "new.py", "out.py")
    assert str(info.value) == f"out.py: folder {folder} does not exist"
    assert info.value.exit_code == 2 and not folder.exists()


# -- special files -------------------------------------------------------------------------
def test_fifo_refused_without_hanging(tmp_path):
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    with pytest.raises(SpecialFileError) as info:
        within(5, read_source, fifo)
    assert info.value.exit_code == 2
    assert "FIFO" in str(info.value) and str(fifo) in str(info.value)
    with pytest.raises(SpecialFileError):
        within(5, check_writable, fifo)
    with pytest.raises(SpecialFileError):
        within(5, read_snapshot, fifo)
    with pytest.raises(SpecialFileError):
        within(5, atomic_write, fifo, b"x\n")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_symlink_to_fifo_refused(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "link.py"
    link.symlink_to(fifo)
    with pytest.raises(SpecialFileError):
        within(5, read_source, link)


def test_socket_refused(tmp_path):
    path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        with pytest.raises(SpecialFileError, match="socket"):
            within(5, read_source, path)


def test_character_device_refused():
    with pytest.raises(SpecialFileError, match="character device"):
        within(5, read_source, "/dev/null")
    with pytest.raises(SpecialFileError):
        check_writable("/dev/null")


def test_directory_is_still_an_input_error(tmp_path):
    with pytest.raises(InputError, match="is a directory"):
        read_source(tmp_path)
    assert read_snapshot(tmp_path / "missing") is None


# -- stdin -----------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"])
def test_stdin_aliases(path):
    assert is_stdin_path(path)


def test_not_stdin():
    assert not is_stdin_path("stdin") and not is_stdin_path("/dev/stdout")


_READ_STDIN = """
import json, sys
from adapld_cli.edit.errors import InputError
from adapld_cli.edit.files.source import read_source, write_source
src = read_source(sys.argv[1])
try:
    write_source(src, b"y\\n")
    refused = None
except InputError as exc:
    refused = exc.exit_code
print(json.dumps([src.name, src.path, src.snapshot, src.text, src.newline, refused]))
"""


@pytest.mark.parametrize("path", ["/dev/stdin", "-"])
def test_dev_stdin_reads_like_dash(path):
    """A real process reading a real pipe on its standard input."""
    done = subprocess.run([sys.executable, "-c", _READ_STDIN, path], input=b"x = 1\r\n",
                          capture_output=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    name, path_, snapshot, text, newline, refused = json.loads(done.stdout)
    assert name == "<stdin>" and path_ is None and snapshot is None
    assert text == "x = 1\n" and newline == "\r\n"
    assert refused == 2  # there is no file to write back to


def test_unique_paths(py, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    link = tmp_path / "link.py"
    link.symlink_to(py)
    twin = tmp_path / "twin.py"
    os.link(py, twin)
    other = tmp_path / "b.py"
    other.write_text("b\n")
    given = ["a.py", str(py), "./a.py", "b.py", "link.py", "twin.py", "gone.py", "./gone.py"]
    assert unique_paths(given) == ["a.py", "b.py", "gone.py"]
    assert unique_paths(["-", "/dev/stdin"]) == ["-"]


def test_hard_link_write_failure_puts_the_old_bytes_back(py, tmp_path, monkeypatch):
    os.link(py, tmp_path / "twin.py")
    src = read_source(py)
    real_pwrite = os.pwrite
    calls = []

    def flaky(fd, data, offset):
        calls.append(offset)
        if len(calls) == 1:
            real_pwrite(fd, bytes(data[:3]), offset)  # a partial write, then the disk fails
            raise OSError(5, "Input/output error")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", flaky)
    with pytest.raises(OSError):
        write_source(src, b"completely new content\n")
    assert py.read_bytes() == src.raw
    assert leftovers(tmp_path) == []
