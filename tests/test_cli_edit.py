"""`adapld edit` through Typer's CliRunner on the scripted tiny models.

Contract checked: stdout carries only data (file, diff), messages go to stderr, every error
case gives its exit code with the user's file byte- and mtime-identical afterwards.
"""

from __future__ import annotations

import json
import os
import stat

import pytest
from typer.testing import CliRunner

from adapld_cli.cli.app import app


@pytest.fixture
def cli(tiny_models):
    runner = CliRunner()

    def run(*args: str, model: str = "rename", input: bytes | None = None):
        argv = [str(a) for a in args]
        if model:
            argv += ["--model", str(tiny_models[model])]
        return runner.invoke(app, ["edit", *argv], input=input, catch_exceptions=False)

    return run


def snapshot(path):
    st = path.stat()
    return path.read_bytes(), st.st_mtime_ns


def test_in_place_edit(cli, source_file, texts):
    os.chmod(source_file, 0o640)
    r = cli(source_file, "-i", "rename foo to bar")
    assert r.exit_code == 0, r.stderr
    assert r.stdout == ""
    assert source_file.read_text() == texts.renamed
    assert stat.S_IMODE(source_file.stat().st_mode) == 0o640
    assert "calc.py: edited — renamed foo -> bar; changed main" in r.stderr
    assert "tokens in" in r.stderr and "passes" in r.stderr
    assert "\x1b[" not in r.stderr
    assert sorted(p.name for p in source_file.parent.iterdir()) == ["calc.py"]


def test_unchanged_leaves_file_alone(cli, source_file):
    before = snapshot(source_file)
    r = cli(source_file, "-i", "nothing", model="same")
    assert r.exit_code == 0 and r.stdout == ""
    assert snapshot(source_file) == before
    assert "calc.py: unchanged" in r.stderr


def test_stdout_mode(cli, source_file, texts):
    before = snapshot(source_file)
    r = cli(source_file, "-i", "rename", "--stdout")
    assert r.exit_code == 0
    assert r.stdout == texts.renamed
    assert snapshot(source_file) == before


def test_output_file(cli, source_file, texts, tmp_path):
    before = snapshot(source_file)
    out = tmp_path / "out" / "renamed.py"
    out.parent.mkdir()
    r = cli(source_file, "-i", "rename", "-o", out)
    assert r.exit_code == 0, r.stderr
    assert out.read_text() == texts.renamed
    assert snapshot(source_file) == before
    assert r.stdout == ""


def test_diff_mode(cli, source_file):
    before = snapshot(source_file)
    r = cli(source_file, "-i", "rename", "--diff")
    assert r.exit_code == 0
    assert r.stdout.startswith("--- a/")
    assert "-def foo(a, b):\n+def bar(a, b):\n" in r.stdout
    assert "@@ -1,6 +1,6 @@" in r.stdout
    assert snapshot(source_file) == before
    assert "renamed foo -> bar" in r.stderr


def test_stdin_to_stdout(cli, texts):
    r = cli("-", "-i", "rename", "--stdin-filename", "calc.py", input=texts.source.encode())
    assert r.exit_code == 0, r.stderr
    assert r.stdout == texts.renamed
    plain = cli("-", "-i", "rename", input=texts.source.encode())  # no language: plain fence
    assert plain.exit_code == 0 and plain.stdout == texts.renamed
    assert "<stdin>: changed" in plain.stderr


def test_stdin_binary_is_rejected(cli):
    r = cli("-", "-i", "rename", input=b"\x00\x01")
    assert r.exit_code == 2 and r.stdout == ""
    assert "binary" in r.stderr


def test_crlf_bom_preserved(cli, source_file, texts):
    source_file.write_bytes(b"\xef\xbb\xbf" + texts.source.replace("\n", "\r\n").encode())
    r = cli(source_file, "-i", "rename")
    assert r.exit_code == 0
    assert (
        source_file.read_bytes() == b"\xef\xbb\xbf" + texts.renamed.replace("\n", "\r\n").encode()
    )


def test_stats_json(cli, source_file, tmp_path):
    stats = tmp_path / "stats.jsonl"
    r = cli(source_file, "-i", "rename", "--stats-json", stats, "--method", "ar")
    assert r.exit_code == 0
    rows = [json.loads(line) for line in stats.read_text().splitlines()]
    assert len(rows) == 1
    row = rows[0]
    for key in (
        "method", "new_tokens", "forward_passes", "mean_accepted", "prefill_s", "decode_s",
        "total_s", "drafted_tokens", "accepted_draft_tokens", "accept_hist",
    ):  # fmt: skip
        assert key in row
    assert row["method"] == "ar" and row["status"] == "edited"
    assert row["forward_passes"] == row["new_tokens"]
    assert row["path"] == str(source_file)


def test_check_mode(cli, source_file, tmp_path, texts):
    before = snapshot(source_file)
    r = cli(source_file, "-i", "rename", "--check")
    assert r.exit_code == 1
    assert "calc.py: would change" in r.stderr and r.stdout == ""
    assert snapshot(source_file) == before
    r = cli(source_file, "-i", "rename", "--check", "--diff")
    assert r.exit_code == 1 and r.stdout.startswith("--- a/")
    same = cli(source_file, "-i", "nothing", "--check", model="same")
    assert same.exit_code == 0 and "unchanged" in same.stderr


def test_syntax_refusal_and_force(cli, source_file, texts):
    before = snapshot(source_file)
    r = cli(source_file, "-i", "rename", model="broken")
    assert r.exit_code == 1
    # the scripted model repeats its answer when asked again (--attempts 2, the default)
    assert "calc.py: refused after 2 attempts — the edited file does not parse (line 1" in r.stderr
    assert "--force" in r.stderr
    assert snapshot(source_file) == before
    forced = cli(source_file, "-i", "rename", "--force", model="broken")
    assert forced.exit_code == 0
    assert source_file.read_text() == texts.broken
    assert "--force: kept despite a syntax error (line 1" in forced.stderr


def test_truncation_refused(cli, source_file):
    before = snapshot(source_file)
    r = cli(source_file, "-i", "rename", "--max-new-tokens", "7", model="loop")
    assert r.exit_code == 1
    assert "token limit (7)" in r.stderr
    assert snapshot(source_file) == before


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "no such file"),
        ("dir", "is a directory"),
        (b"\x7fELF\x00\x00binary", "binary file"),
        (b"x = '\xe9'\n", "not UTF-8"),
    ],
)
def test_bad_inputs(cli, tmp_path, content, needle):
    path = tmp_path / "target.py"
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    before = snapshot(path) if content not in (None, "dir") else None
    r = cli(path, "-i", "rename")
    assert r.exit_code == 2
    assert needle in r.stderr
    assert r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1
    if before is not None:
        assert snapshot(path) == before


def test_too_long_for_context(cli, source_file):
    before = snapshot(source_file)
    r = cli(source_file, "-i", "rename", model="small-context")
    assert r.exit_code == 2
    assert "too long for the model's context" in r.stderr
    assert snapshot(source_file) == before


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["-i", "  "], "empty instruction"),
        ([], "missing the instruction"),
        (["-i", "x", "--stdout", "--diff"], "choose one of"),
        (["-i", "x", "--check", "--stdout"], "--check writes nothing"),
        (["-i", "x", "--prompt", "nope"], "no such template"),
    ],
)
def test_usage_errors(cli, source_file, args, needle):
    before = snapshot(source_file)
    r = cli(source_file, *args)
    assert r.exit_code == 2, r.stderr
    assert needle in r.stderr and r.stdout == ""
    assert snapshot(source_file) == before


def test_usage_errors_on_paths(cli, source_file, tmp_path):
    before = snapshot(source_file)
    r = cli(source_file, source_file, "-i", "x", "-o", tmp_path / "o")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr == "adapld: error: --output takes exactly one input path\n"
    assert not (tmp_path / "o").exists() and snapshot(source_file) == before
    r = cli("-", source_file, "-i", "x")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr == "adapld: error: '-' (stdin) cannot be combined with other paths\n"


def test_instruction_file(cli, source_file, tmp_path, texts):
    instr = tmp_path / "instr.txt"
    instr.write_text("rename foo to bar\n")
    r = cli(source_file, "--instruction-file", instr)
    assert r.exit_code == 0 and source_file.read_text() == texts.renamed


def test_bad_model(cli, source_file, tmp_path):
    before = snapshot(source_file)
    r = cli(source_file, "-i", "x", "--model", tmp_path / "no-such-model", model="")
    assert r.exit_code == 2 and r.stdout == ""
    missing = tmp_path / "no-such-model"
    assert r.stderr == f"adapld: error: --model {missing}: no such file or folder\n"
    assert snapshot(source_file) == before


def test_many_files_one_failing(cli, tmp_path, texts):
    good = tmp_path / "good.py"
    good.write_text(texts.source)
    done = tmp_path / "done.py"
    done.write_text(texts.renamed)  # the model's answer already: unchanged
    bad = tmp_path / "bad.py"
    bad.write_bytes(b"\xff\xfe\x00\x00")
    missing = tmp_path / "missing.py"
    done_before = snapshot(done)
    stats = tmp_path / "stats.jsonl"
    r = cli(good, bad, done, missing, "-i", "rename", "--stats-json", stats)
    assert r.exit_code == 2
    assert good.read_text() == texts.renamed
    assert snapshot(done) == done_before
    lines = r.stderr.strip().splitlines()
    assert any(line.startswith(f"{good}: edited") for line in lines)
    assert any(line.startswith(f"{done}: unchanged") for line in lines)
    assert any(line.startswith(f"{bad}: error") for line in lines)
    assert lines[-1] == "adapld: 4 files: 1 edited, 1 unchanged, 2 errors (exit 2)"
    statuses = sorted(json.loads(x)["status"] for x in stats.read_text().splitlines())
    assert statuses == ["edited", "error", "error", "unchanged"]


def test_all_inputs_bad_skips_model_load(cli, tmp_path):
    r = cli(tmp_path / "a.py", tmp_path / "b.py", "-i", "x", "--model", tmp_path / "nope",
            model="")  # fmt: skip
    assert r.exit_code == 2
    assert "nope" not in r.stderr  # the model was never looked up


def test_quiet(cli, source_file):
    r = cli(source_file, "-i", "rename", "-q")
    assert r.exit_code == 0 and r.stderr == "" and r.stdout == ""


def test_env_model(tiny_models, source_file, monkeypatch, texts):
    monkeypatch.setenv("ADAPLD_MODEL", str(tiny_models["rename"]))
    r = CliRunner().invoke(app, ["edit", str(source_file), "-i", "rename"])
    assert r.exit_code == 0 and source_file.read_text() == texts.renamed


def test_pre_commit_and_no_color_are_plain(cli, source_file, monkeypatch):
    monkeypatch.setenv("PRE_COMMIT", "1")
    monkeypatch.setenv("FORCE_COLOR", "1")
    r = cli(source_file, "-i", "rename", model="broken")
    assert r.exit_code == 1 and "\x1b[" not in r.stderr
    monkeypatch.delenv("PRE_COMMIT")
    monkeypatch.setenv("NO_COLOR", "1")
    r = cli(source_file, "-i", "rename", model="broken")
    assert "\x1b[" not in r.stderr


def test_help_lists_exit_codes():
    r = CliRunner().invoke(app, ["edit", "--help"])
    assert r.exit_code == 0
    assert "Exit codes" in r.stdout and "--stats-json" in r.stdout


def test_threads_are_set_before_the_model_loads(cli, source_file):
    import torch

    before = torch.get_num_threads()
    try:
        r = cli(source_file, "-i", "rename", "--threads", "1", "--verbose")
        assert r.exit_code == 0, r.stderr
        assert torch.get_num_threads() == 1 and ", 1 threads, loaded in" in r.stderr
    finally:
        torch.set_num_threads(before)
