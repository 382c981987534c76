"""Issue 9's table, end to end: every way an edit used to damage a file, on scripted models.

Each row asserts the exit code, the message, and that the user's file keeps its bytes and its
mtime (or, for the rows where a write is right, that the file keeps its identity). Rows that
need the edit layer's own seams (a step callback, a view) call
:func:`adapld_cli.edit.run.run_edit` — the function the `adapld edit` command calls — with the
same config the command builds.
"""

from __future__ import annotations

import importlib.resources
import io
import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from adapld_cli.cli.app import app
from adapld_cli.edit import WriteBack, load_template
from adapld_cli.edit.interrupt import Signals
from adapld_cli.edit.run import EditConfig, ModelConfig, run_edit
from adapld_cli.ui import ConsoleView
from tests.scripted import build_models

ADAPLD = [sys.executable, "-c", "from adapld_cli.cli.app import main; main()"]  # a real process
INVENTORY = (importlib.resources.files("adapld_cli.data") / "inventory.py").read_text()
# What the embedded model once answered for "add a docstring to the tagged method": 7 lines.
FRAGMENT = '''def tagged(inventory, tag: str) -> list:
    """Items that carry `tag`."""
    return [
        item
        for item in inventory.items.values()
        if tag in item.tags
    ]
'''
CONFIG_JSON = '{\n  "name": "demo",\n  "port": 8080,\n  "debug": false\n}\n'
CONFIG_COMMENTED = (
    '{\n  // the service name\n  "name": "demo",\n  "port": 8080,\n  "debug": false\n}\n'
)
LONG = f'DATA = "{"x" * 8000}"\n\n\ndef size():\n    return len(DATA)\n'
LONG_DOCSTRING = 'def size():\n    """Size of DATA."""\n    return len(DATA)\n'
NOTEBOOK = json.dumps(
    {
        "cells": [
            {
                "cell_type": "code",
                "metadata": {},
                "source": ["def area(r):\n", "    return r * r"],
                "outputs": [],
                "execution_count": None,
            },  # fmt: skip
            {"cell_type": "markdown", "metadata": {}, "source": ["# notes"]},
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    },
    indent=1,
)


@pytest.fixture(scope="module")
def models(tmp_path_factory, tiny_models):
    root = tmp_path_factory.mktemp("trust-models")
    answers = {
        "fragment": FRAGMENT,
        "json-comment": CONFIG_COMMENTED,
        "lost": LONG_DOCSTRING,
        "empty": "",  # the model closes the fence at once
    }
    return {**tiny_models, **build_models(root, answers, extra=(INVENTORY, CONFIG_JSON, LONG))}


@pytest.fixture
def cli(models):
    runner = CliRunner()

    def run(*args, model: str = "rename"):
        argv = [str(a) for a in args]
        if model:
            argv += ["--model", str(models[model])]
        return runner.invoke(app, ["edit", "--no-live", *argv], catch_exceptions=False)

    return run


def snapshot(path):
    st = path.stat()
    return path.read_bytes(), st.st_mtime_ns


def lines(result):
    return result.stderr.strip().splitlines()


def run_direct(models, path, *, model="rename", on_event=None, view=None, paths=None):
    """`adapld edit PATH -i rename` through run_edit, with SIGINT/SIGTERM handled."""
    buf = io.StringIO()
    view = view or ConsoleView(Console(file=buf, width=200), live=False)
    config = EditConfig(
        paths=[str(p) for p in (paths or [path])],
        instruction="rename foo to bar",
        template=load_template(None),
        writeback=WriteBack(),
        model=ModelConfig(spec=str(models[model]), threads=1),
    )
    with Signals() as signals:
        report = run_edit(config, view, signals=signals, on_event=on_event)
    return report, buf.getvalue()


# -- rows that are the edit layer's own ----------------------------------------------------------


@pytest.mark.parametrize(("signum", "code", "detail"), [
    (signal.SIGINT, 130, "interrupted — nothing written"),
    (signal.SIGTERM, 143, "interrupted — SIGTERM received; nothing written"),
])  # fmt: skip
def test_signal_at_the_last_step_writes_nothing(models, source_file, signum, code, detail):
    before = snapshot(source_file)

    def at_last_step(event):
        if event.finished:
            os.kill(os.getpid(), signum)

    report, err = run_direct(models, source_file, on_event=at_last_step)
    assert report.exit_code == code
    assert f"{source_file}: {detail}" in err
    assert snapshot(source_file) == before
    assert sorted(p.name for p in source_file.parent.iterdir()) == ["calc.py"]


def _blocked_reading_stdin(proc) -> bool:
    """Whether ``proc`` handles SIGTERM itself (adapld's handler is in place) and sleeps in a
    read of the pipe on its standard input (nothing is ever written to it)."""
    proc_dir = Path(f"/proc/{proc.pid}")
    try:
        status = dict(ln.split(":", 1) for ln in (proc_dir / "status").read_text().splitlines())
        wchan = (proc_dir / "wchan").read_text()
    except OSError:
        return False
    handled = int(status["SigCgt"], 16) >> (signal.SIGTERM - 1) & 1
    sleeping = status["State"].split()[0] == "S" and ("pipe" in wchan or wchan in ("", "0"))
    return bool(handled) and sleeping


def test_sigterm_before_the_model_loads(tmp_path):
    """A real SIGTERM to a real `adapld edit -` blocked reading its stdin pipe."""
    proc = subprocess.Popen([*ADAPLD, "edit", "-", "-i", "rename", "--stdout",
                             "--model", str(tmp_path / "no-such-model")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=tmp_path)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and not _blocked_reading_stdin(proc):
            assert time.monotonic() < deadline, "adapld never blocked reading stdin"
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()[1].decode()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143, err.decode()
    assert err.decode() == "adapld: error: terminated (SIGTERM); nothing written\n"
    assert out == b""  # and the model was never looked up (it does not exist)


class SignalWhileReporting(ConsoleView):
    """A view that receives SIGINT while it prints a file's result line (after the write)."""

    def outcome(self, outcome, baseline_tok_s=None):
        os.kill(os.getpid(), signal.SIGINT)
        super().outcome(outcome, baseline_tok_s)


def test_a_written_file_is_reported_as_written_whatever_arrives_after(models, tmp_path, texts):
    first, second = tmp_path / "a.py", tmp_path / "b.py"
    first.write_text(texts.source)
    second.write_text(texts.source)
    before = snapshot(second)
    buf = io.StringIO()
    view = SignalWhileReporting(Console(file=buf, width=200), live=False)
    report, _ = run_direct(models, first, view=view, paths=[first])
    assert report.exit_code == 0 and first.read_text() == texts.renamed
    assert "a.py: edited" in buf.getvalue()
    first.write_text(texts.source)
    buf.truncate(0)
    report, _ = run_direct(models, first, view=view, paths=[first, second])
    out = buf.getvalue()
    assert report.exit_code == 130
    assert first.read_text() == texts.renamed and f"{first}: edited" in out
    assert "interrupted; 1 more file(s) not edited" in out
    assert snapshot(second) == before


def test_stats_json_failure_never_unwrites_an_edit(cli, source_file, texts):
    r = cli(source_file, "-i", "rename", "--stats-json", "/dev/full")
    assert source_file.read_text() == texts.renamed
    assert lines(r)[0].startswith(f"{source_file}: edited — renamed foo -> bar")
    assert "refused" not in r.stderr and "Traceback" not in r.stderr
    assert lines(r)[1] == (
        "adapld: error: --stats-json /dev/full: cannot write (No space left on device)"
    )
    assert r.exit_code == 2


def test_same_path_twice_is_edited_once(cli, source_file, texts):
    spelled = source_file.parent / "." / source_file.name
    r = cli(source_file, spelled, source_file, "-i", "rename")
    assert r.exit_code == 0, r.stderr
    assert source_file.read_text() == texts.renamed
    assert len(lines(r)) == 1 and lines(r)[0].startswith(f"{source_file}: edited")


def test_unchanged_says_the_model_made_no_change(cli, source_file):
    before = snapshot(source_file)
    r = cli(source_file, "-i", "add a docstring", model="same")
    assert r.exit_code == 0
    assert lines(r)[0].startswith(
        f"{source_file}: unchanged after 2 attempts — the model made no change"
    )
    assert snapshot(source_file) == before


def test_help_documents_every_exit_code():
    r = CliRunner().invoke(app, ["edit", "--help"], env={"COLUMNS": "200"})
    for code in ("0 done", "1 refused", "2 bad usage", "130 interrupted", "143"):
        assert code in r.stdout


# -- the scope guard and format checks ---------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("inv.py", "would delete Item, Inventory, report (+4 more), which the instruction does "
                   "not name"),
        ("inv", "would drop 43 of 50 non-blank lines, which the instruction does not ask for"),
    ],
)  # fmt: skip
def test_fragment_over_a_file_is_refused(cli, tmp_path, name, why):
    path = tmp_path / name
    path.write_text(INVENTORY)
    before = snapshot(path)
    r = cli(path, "-i", "add a docstring to the tagged method", model="fragment")
    assert r.exit_code == 1
    assert lines(r) == [
        f"{path}: refused after 2 attempts — {why}; nothing written (--force writes it anyway)"
    ]
    assert snapshot(path) == before
    for mode in ("--check", "--diff", "--stdout"):
        shown = cli(path, "-i", "add a docstring to the tagged method", mode, model="fragment")
        assert shown.exit_code == 1 and f"{path}: refused after 2 attempts — {why}" in shown.stderr
        assert shown.stdout == ""
    forced = cli(path, "-i", "add a docstring", "--force", model="fragment")
    assert forced.exit_code == 0 and path.read_text() == FRAGMENT


def test_an_empty_answer_writes_nothing(cli, tmp_path):
    path = tmp_path / "inv.py"
    path.write_text(INVENTORY)
    before = snapshot(path)
    r = cli(path, "-i", "add a docstring to the tagged method", model="empty")
    assert r.exit_code == 1 and f"{path}: refused" in r.stderr
    assert snapshot(path) == before


def test_output_file_is_guarded_too(cli, tmp_path):
    path, out = tmp_path / "inv.py", tmp_path / "out.py"
    path.write_text(INVENTORY)
    r = cli(path, "-i", "add a docstring to the tagged method", "-o", out, model="fragment")
    assert r.exit_code == 1 and "refused after 2 attempts — would delete" in r.stderr
    assert not out.exists()


def test_lost_constant_is_refused(cli, tmp_path):
    path = tmp_path / "long.py"
    path.write_text(LONG)
    before = snapshot(path)
    r = cli(path, "-i", "add a docstring to size", model="lost")
    assert r.exit_code == 1
    assert f"{path}: refused after 2 attempts — would delete DATA" in r.stderr
    assert snapshot(path) == before


def test_json_that_no_longer_parses_is_refused(cli, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(CONFIG_JSON)
    before = snapshot(path)
    r = cli(path, "-i", "add a comment explaining each key", model="json-comment")
    assert r.exit_code == 1
    assert f"{path}: refused" in r.stderr and "JSON" in r.stderr
    assert snapshot(path) == before


def test_notebook_is_refused_before_the_model_loads(cli, tmp_path):
    path = tmp_path / "nb.ipynb"
    path.write_text(NOTEBOOK)
    before = snapshot(path)
    r = cli(path, "-i", "add a docstring to area", "--model", tmp_path / "no-such-model", model="")
    assert r.exit_code == 2
    assert len(lines(r)) == 1 and lines(r)[0].startswith(f"{path}: error")
    assert "no-such-model" not in r.stderr  # the model was never looked up
    assert snapshot(path) == before


# -- race-safe writes that keep the file's identity; the undo journal ---------------------------


def test_file_changed_during_generation_is_not_overwritten(models, source_file):
    appended = source_file.read_text() + "# added while adapld was generating\n"

    def append_once(event):
        if not event.finished and source_file.read_text() != appended:
            source_file.write_text(appended)

    report, err = run_direct(models, source_file, on_event=append_once)
    assert report.exit_code == 1
    assert f"{source_file}: refused — changed on disk during the edit; nothing written" in err
    assert source_file.read_text() == appended


def test_hard_link_stays_linked(cli, source_file, texts):
    other = source_file.parent / "other.py"
    os.link(source_file, other)
    inode = source_file.stat().st_ino
    r = cli(source_file, "-i", "rename")
    assert r.exit_code == 0, r.stderr
    assert other.read_text() == texts.renamed and source_file.stat().st_ino == inode
    assert source_file.stat().st_nlink == 2


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
def test_owner_and_group_are_kept(cli, source_file, texts):
    os.chown(source_file, 1000, 1000)
    r = cli(source_file, "-i", "rename")
    assert r.exit_code == 0, r.stderr
    st = source_file.stat()
    assert (st.st_uid, st.st_gid) == (1000, 1000) and source_file.read_text() == texts.renamed


def test_read_only_file_is_refused_unless_forced(cli, source_file, texts):
    os.chmod(source_file, 0o444)
    before = snapshot(source_file)
    r = cli(source_file, "-i", "rename")
    assert r.exit_code == 2 and f"{source_file}: error" in r.stderr and "--force" in r.stderr
    assert snapshot(source_file) == before
    forced = cli(source_file, "-i", "rename", "--force")
    assert forced.exit_code == 0 and source_file.read_text() == texts.renamed
    assert stat.S_IMODE(source_file.stat().st_mode) == 0o444
    assert "written although read-only (mode 0444 kept)" in forced.stderr  # said, not silent


def test_fifo_is_refused_before_the_model_loads(cli, tmp_path):
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    r = cli(fifo, "-i", "rename", "--model", tmp_path / "no-such-model", model="")
    assert r.exit_code == 2 and f"{fifo}: error" in r.stderr
    assert "no-such-model" not in r.stderr


def test_undo_round_trip(cli, source_file, texts, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path.parent)  # undo works from any directory
    r = cli(source_file, "-i", "rename")
    assert r.exit_code == 0 and source_file.read_text() == texts.renamed
    listed = CliRunner().invoke(app, ["undo", "--list"])
    assert listed.exit_code == 0 and "rename" in listed.stdout + listed.stderr
    undone = CliRunner().invoke(app, ["undo"])
    assert undone.exit_code == 0, undone.stderr
    assert source_file.read_text() == texts.source


def test_undo_leaves_a_file_changed_since_alone(cli, source_file, texts, monkeypatch):
    monkeypatch.chdir(source_file.parent)  # undo names files relative to the current folder
    assert cli(source_file, "-i", "rename").exit_code == 0
    source_file.write_text(texts.renamed + "# mine\n")
    undone = CliRunner().invoke(app, ["undo"])
    assert source_file.read_text() == texts.renamed + "# mine\n"
    assert undone.exit_code == 1 and undone.stdout == ""  # 1: some files left alone
    first, summary = undone.stderr.splitlines()
    assert first == "calc.py: left alone — changed since adapld wrote it"
    assert re.fullmatch(
        r'adapld: undid run 1 \(\d{4}-\d\d-\d\d \d\d:\d\d, "rename"\): 1 left alone \(exit 1\)',
        summary,
    ), summary


def test_dev_stdin_is_like_dash(models, texts, tmp_path):
    """A real `adapld edit /dev/stdin` process reading a real pipe, as `cat x | adapld edit`."""
    done = subprocess.run([*ADAPLD, "edit", "/dev/stdin", "-i", "rename", "--stdin-filename",
                           "calc.py", "--model", str(models["rename"])],
                          input=texts.source.encode(), capture_output=True, cwd=tmp_path,
                          timeout=300)  # fmt: skip
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert done.stdout == texts.renamed.encode()  # stdin in, the edited file out on stdout
    line = r"calc\.py: changed — renamed foo -> bar; changed main · 5 tokens in \d+ passes .*\n"
    assert re.fullmatch(line, err), err  # one line, named after --stdin-filename
    assert list(tmp_path.iterdir()) == []  # nothing written anywhere
