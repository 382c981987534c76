"""The undo journal (adapld_cli/edit/files/journal.py): record before replace, bounded, undo."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
from pathlib import Path

import pytest

from adapld_cli.edit.errors import ChangedOnDiskError, JournalError, UndoError
from adapld_cli.edit.files.journal import Journal, journal_dir
from adapld_cli.edit.files.source import read_source
from adapld_cli.model.paths import cache_dir


@pytest.fixture
def journal(tmp_path):
    return Journal(tmp_path / "home" / "journal")


@pytest.fixture
def work(tmp_path):
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


def make(folder, name, data=b"original\n"):
    path = folder / name
    path.write_bytes(data)
    return path


def edit(journal, instruction, *pairs):
    """One run writing ``(path, new_bytes)`` pairs in place."""
    run = journal.begin(instruction)
    for path, data in pairs:
        run.write(read_source(path), data)
    return run


def test_journal_dir_follows_adapld_home(monkeypatch, tmp_path):
    monkeypatch.delenv("ADAPLD_JOURNAL")
    monkeypatch.setenv("ADAPLD_HOME", str(tmp_path / "h"))
    assert journal_dir() == tmp_path / "h" / "journal"
    assert Journal().root == tmp_path / "h" / "journal"
    monkeypatch.setenv("ADAPLD_JOURNAL", str(tmp_path / "own"))
    assert Journal().root == tmp_path / "own"


def test_the_suite_never_writes_the_users_journal(tmp_path):
    """conftest gives every test its own journal (a run of the suite made 8 runs in the
    user's, which keeps 20: three runs of the suite and their own undo history was gone)."""

    assert journal_dir() != cache_dir() / "journal"
    assert journal_dir() == Path(os.environ["ADAPLD_JOURNAL"])


def test_begin_alone_leaves_no_entry(journal):
    journal.begin("nothing written")
    assert journal.list_runs() == []
    assert not journal.root.exists()


def test_round_trip(journal, work):
    a, b = make(work, "a.py", b"a = 1\n"), make(work, "b.py", b"b = 1\n")
    os.chmod(a, 0o640)
    edit(journal, "bump", (a, b"a = 2\n"), (b, b"b = 2\n"))
    [info] = journal.list_runs()
    assert info.number == 1 and info.instruction == "bump" and info.cwd == os.getcwd()
    assert [f.path for f in info.files] == [str(a), str(b)]
    assert info.undone is None
    report = journal.undo()
    assert [(o.path, o.status) for o in report.outcomes] == [
        (str(a), "restored"),
        (str(b), "restored"),
    ]
    assert report.exit_code == 0 and report.summary() == "2 restored"
    assert a.read_bytes() == b"a = 1\n" and b.read_bytes() == b"b = 1\n"
    assert stat.S_IMODE(a.stat().st_mode) == 0o640
    assert journal.list_runs()[0].undone == "2 restored"


def test_record_happens_before_the_replace(journal, work, monkeypatch):
    a = make(work, "a.py")
    seen = []
    real_replace = os.replace

    def spy(src, dst):
        if str(dst) == str(a):
            runs = journal.list_runs()
            seen.append([f.path for r in runs for f in r.files])
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    edit(journal, "x", (a, b"new\n"))
    assert seen == [[str(a)]]


def test_failed_write_leaves_no_entry(journal, work, monkeypatch):
    a = make(work, "a.py")
    real_replace = os.replace

    def boom(src, dst):
        if str(dst) == str(a):
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        edit(journal, "x", (a, b"new\n"))
    assert a.read_bytes() == b"original\n"
    assert journal.list_runs() == []


def test_race_leaves_file_and_journal_alone(journal, work):
    a = make(work, "a.py")
    src = read_source(a)
    a.write_bytes(b"user typed this\n")
    run = journal.begin("x")
    with pytest.raises(ChangedOnDiskError):
        run.write(src, b"model output\n")
    assert a.read_bytes() == b"user typed this\n"
    assert journal.list_runs() == []


def test_journal_failure_means_nothing_written(tmp_path, work):
    a = make(work, "a.py")
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    run = Journal(blocker / "journal").begin("x")
    with pytest.raises(JournalError) as info:
        run.write(read_source(a), b"new\n")
    assert info.value.exit_code == 2 and "nothing written" in str(info.value)
    assert a.read_bytes() == b"original\n"


def test_changed_after_the_edit_is_left_alone(journal, work):
    a, b = make(work, "a.py"), make(work, "b.py")
    edit(journal, "x", (a, b"adapld\n"), (b, b"adapld\n"))
    b.write_bytes(b"the user kept working\n")
    report = journal.undo()
    assert {o.path: o.status for o in report.outcomes} == {
        str(a): "restored",
        str(b): "changed",
    }
    assert report.exit_code == 1 and report.summary() == "1 restored, 1 left alone"
    assert a.read_bytes() == b"original\n"
    assert b.read_bytes() == b"the user kept working\n"


def test_missing_and_already_restored(journal, work):
    a, b = make(work, "a.py"), make(work, "b.py")
    edit(journal, "x", (a, b"adapld\n"), (b, b"adapld\n"))
    a.unlink()
    b.write_bytes(b"original\n")
    report = journal.undo()
    assert {o.path: o.status for o in report.outcomes} == {
        str(a): "missing",
        str(b): "already",
    }
    assert report.exit_code == 1 and not a.exists()


def test_undo_keeps_identity(journal, work):
    a = make(work, "a.py")
    twin = work / "twin.py"
    os.link(a, twin)
    if os.geteuid() == 0:
        os.chown(a, 1000, 1000)
    edit(journal, "x", (a, b"adapld\n"))
    assert twin.read_bytes() == b"adapld\n"
    assert journal.undo().exit_code == 0
    assert twin.read_bytes() == a.read_bytes() == b"original\n"
    assert a.stat().st_nlink == 2
    if os.geteuid() == 0:
        assert (a.stat().st_uid, a.stat().st_gid) == (1000, 1000)


def test_read_only_since_the_edit_needs_force(journal, work):
    a = make(work, "a.py")
    edit(journal, "x", (a, b"adapld\n"))
    os.chmod(a, 0o444)
    report = journal.undo()
    assert report.outcomes[0].status == "read-only" and a.read_bytes() == b"adapld\n"
    report = journal.undo(1, force=True)
    assert report.outcomes[0].status == "restored" and a.read_bytes() == b"original\n"
    assert stat.S_IMODE(a.stat().st_mode) == 0o444


def test_output_targets(journal, work):
    existing = make(work, "out.py", b"old output\n")
    new = work / "new.py"
    run = journal.begin("-o")
    run.write_output(existing, b"generated\n")
    run.write_output(new, b"generated\n", mode=0o600)
    assert stat.S_IMODE(new.stat().st_mode) == 0o600
    report = journal.undo()
    assert {o.path: o.status for o in report.outcomes} == {
        str(existing): "restored",
        str(new): "removed",
    }
    assert existing.read_bytes() == b"old output\n" and not new.exists()


def test_same_path_twice_keeps_the_first_original(journal, work):
    a = make(work, "a.py")
    run = journal.begin("x")
    run.write(read_source(a), b"first\n")
    run.write(read_source(a), b"second\n")
    [info] = journal.list_runs()
    assert len(info.files) == 1
    journal.undo()
    assert a.read_bytes() == b"original\n"


def test_undo_from_another_directory(journal, work, tmp_path, monkeypatch):
    monkeypatch.chdir(work)
    make(work, "rel.py")
    edit(journal, "x", (work / "rel.py", b"adapld\n"))
    run = journal.begin("relative")
    run.write(read_source("rel.py"), b"again\n")  # a relative path is journalled absolute
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert journal.undo().outcomes[0].path == str(work / "rel.py")
    assert (work / "rel.py").read_bytes() == b"adapld\n"
    journal.undo()
    assert (work / "rel.py").read_bytes() == b"original\n"


def test_undo_order_and_numbers(journal, work):
    a = make(work, "a.py", b"v0\n")
    for i in (1, 2, 3):
        edit(journal, f"step {i}", (a, f"v{i}\n".encode()))
    assert [r.instruction for r in journal.list_runs()] == ["step 3", "step 2", "step 1"]
    journal.undo()  # step 3
    assert a.read_bytes() == b"v2\n"
    journal.undo()  # the newest not undone: step 2
    assert a.read_bytes() == b"v1\n"
    report = journal.undo(1)  # step 3 again: a no longer holds v3
    assert report.outcomes[0].status == "changed" and a.read_bytes() == b"v1\n"
    journal.undo(3)
    assert a.read_bytes() == b"v0\n"
    with pytest.raises(UndoError, match="nothing left to undo"):
        journal.undo()


def test_undo_errors(journal, work):
    with pytest.raises(UndoError, match="empty") as info:
        journal.undo()
    assert info.value.exit_code == 2
    edit(journal, "x", (make(work, "a.py"), b"new\n"))
    for n in (0, 2, 99):
        with pytest.raises(UndoError, match=f"no run {n}: the journal holds 1 run "):
            journal.undo(n)


def test_bound_on_runs_drops_the_oldest(tmp_path, work):
    journal = Journal(tmp_path / "j", max_runs=3)
    a = make(work, "a.py", b"v0\n")
    for i in range(1, 6):
        edit(journal, f"step {i}", (a, f"v{i}\n".encode()))
    assert [r.instruction for r in journal.list_runs()] == ["step 5", "step 4", "step 3"]
    assert len(list((tmp_path / "j" / "runs").iterdir())) == 3


def test_bound_on_bytes_drops_the_oldest_but_never_the_current(tmp_path, work):
    journal = Journal(tmp_path / "j", max_bytes=5000)
    files = [make(work, f"f{i}.py", bytes([65 + i]) * 2000) for i in range(3)]
    edit(journal, "first", (files[0], b"x\n"))
    edit(journal, "second", (files[1], b"x\n"))
    assert [r.instruction for r in journal.list_runs()] == ["second", "first"]
    edit(journal, "third", (files[2], b"x\n"))  # 3 x 2000 bytes > 5000
    assert [r.instruction for r in journal.list_runs()] == ["third", "second"]
    big = make(work, "big.py", b"z" * 20000)
    edit(journal, "huge", (big, b"x\n"))  # over the bound alone: kept, all others dropped
    assert [r.instruction for r in journal.list_runs()] == ["huge"]
    journal.undo()
    assert big.read_bytes() == b"z" * 20000


def test_damaged_copy_is_reported_not_restored(journal, work):
    a = make(work, "a.py")
    edit(journal, "x", (a, b"adapld\n"))
    [blob] = (journal.runs_dir).glob("*/*.orig")
    blob.write_bytes(b"bit rot\n")
    report = journal.undo()
    assert report.outcomes[0].status == "failed" and "damaged" in report.outcomes[0].detail
    assert a.read_bytes() == b"adapld\n"


def test_unreadable_run_entries_are_skipped(journal, work):
    edit(journal, "good", (make(work, "a.py"), b"new\n"))
    bad = journal.runs_dir / "99999999999999999999-1"
    bad.mkdir()
    (bad / "run.json").write_text("{not json")
    assert [r.instruction for r in journal.list_runs()] == ["good"]


def test_run_json_is_plain_data(journal, work):
    a = make(work, "a.py")
    edit(journal, "add a docstring", (a, b"new\n"))
    [folder] = journal.runs_dir.iterdir()
    data = json.loads((folder / "run.json").read_text())
    assert data["instruction"] == "add a docstring"
    assert data["files"][0]["path"] == str(a)
    assert (folder / f"{data['files'][0]['original_sha256']}.orig").read_bytes() == b"original\n"


def _one_process(root: str, path: str, i: int) -> None:
    journal = Journal(root)
    run = journal.begin(f"process {i}")
    for k in range(3):
        run.write(read_source(path), f"{i}-{k}\n".encode())


def test_concurrent_runs_do_not_corrupt_the_journal(tmp_path, work):
    root = tmp_path / "j"
    paths = [make(work, f"p{i}.py") for i in range(4)]
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=_one_process, args=(str(root), str(p), i)) for i, p in enumerate(paths)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    runs = Journal(root).list_runs()
    assert sorted(r.instruction for r in runs) == [f"process {i}" for i in range(4)]
    for n in range(1, 5):
        assert Journal(root).undo(n).exit_code == 0
    assert all(p.read_bytes() == b"original\n" for p in paths)


def test_journal_folder_is_private(journal, work):
    edit(journal, "x", (make(work, "a.py"), b"new\n"))
    assert stat.S_IMODE(journal.root.stat().st_mode) == 0o700
