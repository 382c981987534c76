"""The live panel: incremental decoding, rendering, and the real CLI under a pseudo-terminal."""

from __future__ import annotations

import fcntl
import io
import os
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
import time

import pytest

from adapld_cli.engine.types import Source, Stats, StepEvent
from adapld_cli.ui import LivePanel, footer_text, speedup_of
from adapld_cli.ui.panel import IncrementalDecoder

ANSI = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]")


def test_incremental_decoder_holds_split_characters(tiny_tokenizer):
    text = "naïve = 'é✓'\n    return a + b\n\n\nok"
    ids = tiny_tokenizer(text, add_special_tokens=False)["input_ids"]
    dec = IncrementalDecoder(tiny_tokenizer)
    pieces = [dec.push(t) for t in ids]
    assert "".join(pieces) == text
    assert not any("\ufffd" in p for p in pieces)


def test_speedup_labels():
    s = Stats(method="adapld", new_tokens=100, forward_passes=20, decode_s=2.0, ar_step_s=0.1)
    assert speedup_of(s, None) == (pytest.approx(5.0), "est.")
    assert speedup_of(s, 10.0) == (pytest.approx(5.0), "measured")
    assert speedup_of(Stats(method="ar", new_tokens=5, decode_s=1.0), None)[1] == ""
    assert "5.0x vs plain decoding (est.)" in footer_text(s)
    assert "T=5.00" in footer_text(s)


def test_panel_renders_coloured_tail(tiny_tokenizer):
    from rich.console import Console

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=80, height=20, color_system="truecolor")
    ids = tiny_tokenizer("line one\nline two\n", add_special_tokens=False)["input_ids"]
    stats = Stats(method="adapld", new_tokens=len(ids), forward_passes=3, decode_s=0.5)
    panel = LivePanel(console, tiny_tokenizer, title="demo.py · adapld")
    half = len(ids) // 2
    panel.on_event(StepEvent(ids[:half], [Source.LEXICAL] * half, stats))
    panel.on_event(StepEvent(ids[half:], [Source.MODEL] * (len(ids) - half), stats, True, "eos"))
    console.print(panel.render())
    out = buf.getvalue()
    assert "demo.py · adapld" in out
    plain = ANSI.sub("", out)
    assert "line one" in plain and "line two" in plain
    assert f"{len(ids)} tokens" in out and "3 passes" in out
    assert "\x1b[32m" in out  # green = copied
    assert [p for p, _ in panel.pieces] and "".join(p for p, _ in panel.pieces) == (
        "line one\nline two\n"
    )


@pytest.mark.parametrize("fence", ["`", "``", "```"])
def test_panel_hides_the_closing_fence(tiny_tokenizer, fence):
    from rich.console import Console

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=80, height=20)
    text = "x = '`'\nline two\n" + fence
    ids = tiny_tokenizer(text, add_special_tokens=False)["input_ids"]
    stats = Stats(method="adapld", new_tokens=len(ids), forward_passes=2, decode_s=0.5)
    panel = LivePanel(console, tiny_tokenizer, title="demo.py · adapld")
    panel.on_event(StepEvent(ids, [Source.LEXICAL] * len(ids), stats, True, "stop_string"))
    console.print(panel.render())
    body = [ln.strip("│ ") for ln in ANSI.sub("", buf.getvalue()).splitlines()]
    assert "x = '`'" in body and "line two" in body  # backticks inside the file stay
    assert not any(ln and set(ln) == {"`"} for ln in body)


def _default_sigint() -> None:
    """In the child before exec: SIGINT handled and unblocked, as a shell starts a command
    (a disposition or mask inherited from the test process must not decide a Ctrl-C test)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _spawn(args, env_extra, cwd):
    """Run `adapld` with stderr on a pty (80x24) and stdout on a pipe."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("PRE_COMMIT", "CI", "NO_COLOR")}
    env.update(TERM="xterm-256color", **env_extra)
    proc = subprocess.Popen(
        [sys.executable, "-c", "from adapld_cli.cli.app import main; main()", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
        env=env,
        cwd=cwd,
        preexec_fn=_default_sigint,
    )
    os.close(slave)
    chunks: list[bytes] = []

    def pump():
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    return proc, chunks, reader, master


def _finish(proc, reader, master, timeout=180):
    stdout = proc.communicate(timeout=timeout)[0]
    reader.join(timeout=5)
    os.close(master)
    return stdout


def test_live_panel_in_a_terminal(tiny_models, source_file, texts):
    args = ["edit", str(source_file), "-i", "rename", "--stdout", "--model",
            str(tiny_models["rename"])]  # fmt: skip
    proc, chunks, reader, master = _spawn(args, {}, source_file.parent)
    stdout = _finish(proc, reader, master)
    err = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0, err
    assert stdout.decode() == texts.renamed  # the panel never touches stdout
    assert "calc.py · adapld" in err  # the panel was drawn
    assert "\x1b[" in err  # with terminal control codes
    assert "calc.py: changed" in re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", err)


@pytest.mark.parametrize("env", [{"PRE_COMMIT": "1"}, {"CI": "true"}])
def test_no_panel_inside_pre_commit_or_ci(tiny_models, source_file, env):
    args = ["edit", str(source_file), "-i", "rename", "--model", str(tiny_models["rename"])]
    proc, chunks, reader, master = _spawn(args, env, source_file.parent)
    _finish(proc, reader, master)
    err = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0, err
    assert "calc.py · adapld" not in err
    assert "calc.py: edited" in re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", err)
    if "PRE_COMMIT" in env:
        assert "\x1b[" not in err


@pytest.mark.parametrize(("env", "live"), [({}, True), ({"NO_COLOR": "1"}, False),
                                           ({"PRE_COMMIT": "1"}, False), ({"CI": "1"}, False),
                                           ({"TERM": "dumb"}, False)])  # fmt: skip
def test_console_policy(monkeypatch, env, live):
    from adapld_cli.ui import live_wanted, stderr_console

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    console = stderr_console()
    console._force_terminal = True  # as if stderr were a terminal
    assert live_wanted(console) is live
    assert live_wanted(console, no_live=True) is False
    if env.get("NO_COLOR") or env.get("PRE_COMMIT"):
        assert console.color_system is None


def test_interrupt_writes_nothing(tiny_models, source_file):
    before = source_file.read_bytes(), source_file.stat().st_mtime_ns
    args = ["edit", str(source_file), "-i", "rename", "--max-new-tokens", "20000",
            "--method", "ar", "--model", str(tiny_models["loop"])]  # fmt: skip
    proc, chunks, reader, master = _spawn(args, {}, source_file.parent)
    deadline = time.time() + 120
    while time.time() < deadline and b"passes" not in b"".join(chunks):
        time.sleep(0.2)
    assert proc.poll() is None, b"".join(chunks).decode("utf-8", "replace")
    proc.send_signal(signal.SIGINT)
    _finish(proc, reader, master)
    err = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert (source_file.read_bytes(), source_file.stat().st_mtime_ns) == before
    assert sorted(p.name for p in source_file.parent.iterdir()) == ["calc.py"]
