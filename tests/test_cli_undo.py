"""`adapld undo` through Typer's CliRunner (no model: runs are journalled through the API).

Contract checked: the list goes to stdout, messages to stderr, one line per file, exit 0 when
every file is restored, 1 when some were left alone, 2 for bad usage.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from adapld_cli.cli.app import app
from adapld_cli.edit.files.journal import Journal
from adapld_cli.edit.files.source import read_source


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("ADAPLD_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def work(tmp_path, monkeypatch):
    folder = tmp_path / "work"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def undo(*args: str):
    return CliRunner().invoke(app, ["undo", *args], catch_exceptions=False)


def journalled(instruction: str, *pairs):
    run = Journal().begin(instruction)
    for path, data in pairs:
        run.write(read_source(path), data)


def make(folder, name, data=b"original\n"):
    path = folder / name
    path.write_bytes(data)
    return path


def test_undo_is_listed_in_help():
    r = CliRunner().invoke(app, ["--help"])
    assert r.exit_code == 0 and "undo" in r.stdout
    r = undo("--help")
    assert r.exit_code == 0
    assert "--list" in r.stdout and "<bool>" not in r.stdout.split("--help")[0]


def test_undo_last_run(home, work):
    a, b = make(work, "a.py"), make(work, "b.py")
    journalled("rename foo", (a, b"new a\n"), (b, b"new b\n"))
    r = undo()
    assert r.exit_code == 0, r.stderr
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert lines[:2] == ["a.py: restored", "b.py: restored"]
    assert lines[2].startswith("adapld: undid run 1 (") and '"rename foo"' in lines[2]
    assert lines[2].endswith("2 restored (exit 0)")
    assert a.read_bytes() == b.read_bytes() == b"original\n"


def test_undo_leaves_changed_files_alone(home, work):
    a, b = make(work, "a.py"), make(work, "b.py")
    journalled("x", (a, b"new a\n"), (b, b"new b\n"))
    b.write_bytes(b"edited by hand\n")
    r = undo()
    assert r.exit_code == 1
    assert "a.py: restored" in r.stderr
    assert "b.py: left alone — changed since adapld wrote it" in r.stderr
    assert r.stderr.rstrip().endswith("1 restored, 1 left alone (exit 1)")
    assert b.read_bytes() == b"edited by hand\n"


def test_list_then_undo_n(home, work):
    a = make(work, "a.py", b"v0\n")
    journalled("first step", (a, b"v1\n"))
    journalled("second\nstep", (a, b"v2\n"))
    r = undo("--list")
    assert r.exit_code == 0 and r.stderr == ""
    lines = r.stdout.splitlines()
    assert len(lines) == 2
    assert lines[0].split()[0] == "1" and lines[0].endswith('a.py  "second step"')
    assert lines[1].split()[0] == "2" and lines[1].endswith('a.py  "first step"')
    r = undo("2")  # a holds v2, not what run 2 wrote
    assert r.exit_code == 1 and "a.py: left alone" in r.stderr
    assert undo().exit_code == 0 and a.read_bytes() == b"v1\n"
    assert undo("2").exit_code == 0 and a.read_bytes() == b"v0\n"
    listed = undo("-l").stdout.splitlines()
    assert "(undone: 1 restored)" in listed[0] and "(undone: 1 restored)" in listed[1]


def test_list_json(home, work):
    a = make(work, "a.py")
    journalled("add a docstring", (a, b"new\n"))
    r = undo("--list", "--json")
    assert r.exit_code == 0
    [row] = [json.loads(line) for line in r.stdout.splitlines()]
    assert row["number"] == 1 and row["instruction"] == "add a docstring"
    assert row["files"] == [str(a)] and row["cwd"] == str(work) and row["undone"] is None


def test_list_shows_absolute_paths_outside_cwd(home, work, tmp_path, monkeypatch):
    a = make(work, "a.py")
    journalled("x", (a, b"new\n"))
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.chdir(other)
    assert str(a) in undo("--list").stdout


def test_many_files_are_shortened_in_the_list(home, work):
    files = [make(work, f"f{i}.py") for i in range(5)]
    journalled("x", *[(f, b"new\n") for f in files])
    assert "f0.py, f1.py, f2.py (+2 more)" in undo("--list").stdout


def test_undo_from_another_directory(home, work, tmp_path, monkeypatch):
    a = make(work, "a.py")
    journalled("x", (a, b"new\n"))
    other = tmp_path / "elsewhere"
    other.mkdir()
    monkeypatch.chdir(other)
    r = undo()
    assert r.exit_code == 0
    assert f"{a}: restored" in r.stderr
    assert a.read_bytes() == b"original\n"


def test_empty_journal(home, work):
    r = undo()
    assert r.exit_code == 2 and "journal is empty" in r.stderr and r.stdout == ""
    r = undo("--list")
    assert r.exit_code == 0 and r.stdout == "" and "empty" in r.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["3"], "no run 3: the journal holds 1 run"),
        (["0"], "no run 0"),
        (["--json"], "--json goes with --list"),
        (["--list", "1"], "--list takes no run number"),
        (["abc"], "Usage: adapld undo"),
    ],
)
def test_bad_usage(home, work, args, needle):
    journalled("x", (make(work, "a.py"), b"new\n"))
    r = undo(*args)
    assert r.exit_code == 2
    assert needle in r.stderr and r.stdout == ""
    assert (work / "a.py").read_bytes() == b"new\n"


def test_nothing_left_to_undo(home, work):
    journalled("x", (make(work, "a.py"), b"new\n"))
    assert undo().exit_code == 0
    r = undo()
    assert r.exit_code == 2 and "nothing left to undo" in r.stderr


def test_force_restores_a_read_only_file(home, work):
    a = make(work, "a.py")
    journalled("x", (a, b"new\n"))
    a.chmod(0o444)
    r = undo()
    assert r.exit_code == 1 and "a.py: left alone — read-only now" in r.stderr
    r = undo("1", "--force")
    assert r.exit_code == 0 and a.read_bytes() == b"original\n"


def test_list_into_a_closed_pipe_is_no_journal_error(home, work):
    """`adapld undo --list | head -1`: the reader gone is not "cannot read the undo journal"
    (it was: the list's printing sat inside the journal's error handler)."""
    import os
    import subprocess
    import sys

    journalled("x", (make(work, "a.py"), b"new\n"))
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "adapld_cli", "undo", "--list"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write)
    assert "undo journal" not in proc.stderr
    assert proc.returncode == 1  # click's exit for a closed stdout
