"""What happens to a result: write-back modes, outcomes, the run report, stats, signals, inputs.

No model here: results are built from the scripted texts the tiny models produce.
"""

from __future__ import annotations

import io
import json
import os
import signal

import pytest

from adapld_cli.edit import (
    EditResult,
    Mode,
    Outcome,
    RunReport,
    Status,
    UsageError,
    WriteBack,
    apply_result,
    decode_source,
    read_source,
)
from adapld_cli.edit.inputs import EditInput, read_inputs
from adapld_cli.edit.interrupt import Interrupted, Signals
from adapld_cli.edit.outcome import StatsLog
from adapld_cli.engine.types import Stats


def result_for(path, new_text, status="changed", message=None):
    source = read_source(path) if path is not None else decode_source(b"x = 1\n", "<stdin>")
    return EditResult(
        source=source,
        lang="python",
        status=status,
        new_text=new_text,
        stats=Stats(method="adapld", new_tokens=10, forward_passes=2),
        stop_reason="stop_string",
        message=message,
    )


def snapshot(path):
    return path.read_bytes(), path.stat().st_mtime_ns


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, WriteBack(Mode.IN_PLACE)),
        ({"to_stdout": True}, WriteBack(Mode.STDOUT)),
        ({"paths": ["-"]}, WriteBack(Mode.STDOUT)),
        ({"diff": True}, WriteBack(Mode.DIFF, diff=True)),
        ({"check": True}, WriteBack(Mode.CHECK)),
        ({"check": True, "diff": True}, WriteBack(Mode.CHECK, diff=True)),
        ({"output": "o.py"}, WriteBack(Mode.OUTPUT, output="o.py")),
    ],
)
def test_mode_from_options(options, expected):
    options = {"paths": ["a.py"], **options}
    assert WriteBack.from_options(**options) == expected


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"paths": ["-", "a.py"]}, "cannot be combined"),
        ({"to_stdout": True, "diff": True}, "choose one of"),
        ({"check": True, "to_stdout": True}, "--check writes nothing"),
        ({"paths": ["a.py", "b.py"], "output": "o.py"}, "exactly one"),
    ],
)
def test_mode_contradictions(options, needle):
    options = {"paths": ["a.py"], **options}
    with pytest.raises(UsageError, match=needle) as err:
        WriteBack.from_options(**options)
    assert err.value.exit_code == 2


def test_in_place_writes_and_reports(source_file, texts):
    outcome = apply_result(result_for(source_file, texts.renamed), WriteBack())
    assert (outcome.status, outcome.exit_code, outcome.written) == (Status.EDITED, 0, source_file)
    assert source_file.read_text() == texts.renamed and outcome.data == b""


@pytest.mark.parametrize(
    ("writeback", "status", "code", "data"),
    [
        (WriteBack(Mode.STDOUT), Status.CHANGED, 0, "renamed"),
        (WriteBack(Mode.DIFF, diff=True), Status.CHANGED, 0, "diff"),
        (WriteBack(Mode.CHECK), Status.WOULD_CHANGE, 1, ""),
        (WriteBack(Mode.CHECK, diff=True), Status.WOULD_CHANGE, 1, "diff"),
    ],
)
def test_modes_that_write_nothing(source_file, texts, writeback, status, code, data):
    before = snapshot(source_file)
    outcome = apply_result(result_for(source_file, texts.renamed), writeback)
    assert (outcome.status, outcome.exit_code, outcome.written) == (status, code, None)
    assert snapshot(source_file) == before
    if data == "renamed":
        assert outcome.data == texts.renamed.encode()
    elif data == "diff":
        assert outcome.data.startswith(b"--- a/") and b"+def bar(a, b):" in outcome.data
    else:
        assert outcome.data == b""


def test_unchanged_says_the_model_made_no_change(source_file, texts):
    before = snapshot(source_file)
    outcome = apply_result(result_for(source_file, texts.source, "unchanged"), WriteBack())
    assert outcome.status is Status.UNCHANGED and outcome.exit_code == 0
    assert outcome.detail == "the model made no change"
    assert snapshot(source_file) == before


def test_refused_writes_nothing_in_any_mode(source_file, texts, tmp_path):
    before = snapshot(source_file)
    out = tmp_path / "out.py"
    for wb in (WriteBack(), WriteBack(Mode.OUTPUT, output=out), WriteBack(Mode.STDOUT)):
        refused = result_for(source_file, texts.broken, "refused", "does not parse")
        outcome = apply_result(refused, wb)
        assert (outcome.status, outcome.exit_code, outcome.data) == (Status.REFUSED, 1, b"")
        assert outcome.detail == "does not parse"
    assert snapshot(source_file) == before and not out.exists()


def test_output_file_gets_the_source_mode(source_file, texts, tmp_path):
    os.chmod(source_file, 0o751)
    out = tmp_path / "new.py"
    outcome = apply_result(result_for(source_file, texts.source, "unchanged"),
                           WriteBack(Mode.OUTPUT, output=out))  # fmt: skip
    assert outcome.status is Status.WRITTEN and outcome.written == out
    assert outcome.detail == f"to {out}; the model made no change"
    assert out.read_text() == texts.source and (out.stat().st_mode & 0o777) == 0o751


def test_write_failure_is_an_error(source_file, texts, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    outcome = apply_result(result_for(source_file, texts.renamed),
                           WriteBack(Mode.OUTPUT, output=blocker / "out.py"))  # fmt: skip
    assert outcome.status is Status.ERROR and outcome.exit_code == 2
    assert outcome.detail.startswith(f"cannot write {blocker / 'out.py'}:")


def test_checkpoint_runs_before_the_write(source_file, texts):
    before = snapshot(source_file)

    def stop():
        raise Interrupted(signal.SIGTERM)

    with pytest.raises(Interrupted):
        apply_result(result_for(source_file, texts.renamed), WriteBack(), checkpoint=stop)
    assert snapshot(source_file) == before
    # nothing to write: the checkpoint is not consulted
    outcome = apply_result(result_for(source_file, texts.renamed), WriteBack(Mode.DIFF),
                           checkpoint=stop)  # fmt: skip
    assert outcome.status is Status.CHANGED


def test_run_report_counts_and_exit_code():
    report = RunReport()
    for status, code in [(Status.EDITED, 0), (Status.UNCHANGED, 0), (Status.ERROR, 2),
                         (Status.ERROR, 2), (Status.REFUSED, 1)]:  # fmt: skip
        report.add(Outcome("f.py", status, code))
    assert report.exit_code == 2 and report.files == 5
    assert report.summary_line() == (
        "adapld: 5 files: 1 edited, 1 unchanged, 1 refused, 2 errors (exit 2)"
    )
    report.fail(130)
    assert report.exit_code == 130


def test_stats_row_has_one_serialisation(source_file, texts):
    outcome = apply_result(result_for(source_file, texts.renamed), WriteBack(Mode.DIFF))
    row = outcome.stats_row()
    assert row == {"path": str(source_file), "status": "changed",
                   **outcome.stats.as_dict(), "stop_reason": "stop_string",
                   "attempts": 1}  # fmt: skip
    err = Outcome("x.py", Status.ERROR, 2, "no such file").stats_row()
    assert err == {"path": "x.py", "status": "error", "message": "no such file"}


def test_stats_log_failure_is_returned_not_raised(tmp_path):
    log = StatsLog(tmp_path / "stats.jsonl")
    assert log.write(Outcome("a.py", Status.EDITED)) is None and log.close() is None
    assert json.loads((tmp_path / "stats.jsonl").read_text()) == {"path": "a.py",
                                                                   "status": "edited"}  # fmt: skip
    full = StatsLog("/dev/full")
    message = full.write(Outcome("a.py", Status.EDITED))
    assert message == "--stats-json /dev/full: cannot write (No space left on device)"
    assert full.write(Outcome("b.py", Status.EDITED)) is None  # reported once
    assert full.close() is None
    with pytest.raises(UsageError, match="--stats-json"):
        StatsLog(tmp_path / "no-such-dir" / "s.jsonl")


def test_signals_raise_or_wait(monkeypatch):
    previous = signal.getsignal(signal.SIGTERM)
    with Signals() as signals:
        with pytest.raises(Interrupted) as err:
            os.kill(os.getpid(), signal.SIGTERM)
        assert (err.value.exit_code, err.value.name) == (143, "SIGTERM")
        with signals.deferred():
            os.kill(os.getpid(), signal.SIGINT)
            assert signals.pending == signal.SIGINT
        assert signals.pending == signal.SIGINT  # left for the caller
        with pytest.raises(Interrupted) as err:
            signals.check()
        assert err.value.exit_code == 130 and signals.pending is None
        assert isinstance(err.value, KeyboardInterrupt)
    assert signal.getsignal(signal.SIGTERM) is previous


def test_inputs_read_up_front_and_once(tmp_path, texts):
    a = tmp_path / "a.py"
    a.write_text(texts.source)
    link = tmp_path / "link.py"
    os.link(a, link)
    paths = [str(a), str(tmp_path / "." / "a.py"), str(link), str(tmp_path / "gone.py"), str(a)]
    items = read_inputs(paths, WriteBack())
    assert [type(i) for i in items] == [EditInput, Outcome]
    assert items[0].name == str(a) and items[0].source.text == texts.source
    assert items[1].status is Status.ERROR and items[1].detail == "no such file"


def test_stdin_input(texts):
    (item,) = read_inputs(["-"], WriteBack(Mode.STDOUT), stdin=io.BytesIO(texts.source.encode()),
                          stdin_filename="calc.py")  # fmt: skip
    assert (item.name, item.lang, item.source.path) == ("calc.py", "python", None)


def test_writes_are_journalled_and_race_checked(source_file, texts, tmp_path):
    from adapld_cli.edit.files.journal import Journal

    journal = Journal(tmp_path / "journal")
    run = journal.begin("rename foo to bar")
    stale = result_for(source_file, texts.renamed)  # read now...
    source_file.write_text(texts.source + "# mine\n")  # ...changed before the write
    before = snapshot(source_file)
    outcome = apply_result(stale, WriteBack(), journal=run)
    assert (outcome.status, outcome.exit_code) == (Status.REFUSED, 1)
    assert outcome.detail == "changed on disk during the edit; nothing written"
    assert snapshot(source_file) == before and journal.list_runs() == []
    fresh = result_for(source_file, texts.renamed)
    assert apply_result(fresh, WriteBack(), journal=run).status is Status.EDITED
    (info,) = journal.list_runs()
    assert info.instruction == "rename foo to bar"
    assert journal.undo().exit_code == 0
    assert source_file.read_text() == texts.source + "# mine\n"


def test_read_only_needs_force(source_file, texts):
    os.chmod(source_file, 0o444)
    before = snapshot(source_file)
    outcome = apply_result(result_for(source_file, texts.renamed), WriteBack())
    assert (outcome.status, outcome.exit_code) == (
        Status.ERROR,
        2,
    ) and "read-only" in outcome.detail
    assert snapshot(source_file) == before
    forced = apply_result(result_for(source_file, texts.renamed), WriteBack(), force=True)
    assert forced.status is Status.EDITED and source_file.read_text() == texts.renamed
    assert (source_file.stat().st_mode & 0o777) == 0o444
