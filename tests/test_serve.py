"""`adapld serve` and `adapld edit --server`: the real server process (uvicorn) on tiny
scripted models, real HTTP through httpx, the real CLI.

Greedy answers through the server (streamed or not, one at a time or four at once) equal
local plain decoding (``ar``) of the same conversation; prediction counters add up; bad
requests get OpenAI-style 4xx errors and the server keeps serving; a client that disconnects
mid-stream cancels its generation; a full queue answers 503 with Retry-After; SIGTERM exits
0. ``adapld edit --server`` goes through the same checks, write-back and undo as local edits.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from adapld_cli.cli.app import app
from adapld_cli.edit.prompt import chat_text, conversation, load_template
from adapld_cli.serve.protocol import ApiError, parse_chat, prediction_counts
from adapld_cli.serve.worker import TextCutter
from tests.conftest import SOURCE

READY = re.compile(r"at (http://\S+/v1) ")


class Server:
    """A running ``adapld serve`` subprocess."""

    def __init__(self, model: Path, home: Path, *args: str) -> None:
        env = {**os.environ, "ADAPLD_HOME": str(home), "NO_COLOR": "1"}
        env.pop("ADAPLD_API_KEY", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "adapld_cli", "serve", "--model", str(model), "--port", "0",
             "--threads", "1", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        line = self.proc.stderr.readline()
        while line and not READY.search(line):
            line = self.proc.stderr.readline()
        match = READY.search(line)
        assert match, f"server did not start: {line!r} {self.proc.stderr.read()}"
        self.url = match.group(1)
        self.model = model.name

    def chat(self, **body) -> httpx.Response:
        body.setdefault("model", self.model)
        return httpx.post(f"{self.url}/chat/completions", json=body, timeout=60)

    def health(self) -> dict:
        return httpx.get(self.url[: -len("/v1")] + "/health", timeout=10).json()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        finally:
            self.proc.stderr.close()
            self.proc.stdout.close()


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("serve-home")


@pytest.fixture(scope="module")
def rename(tiny_models, home):
    server = Server(tiny_models["rename"], home)
    yield server
    assert server.stop() == 0


@pytest.fixture(scope="module")
def looping(tiny_models, home):
    """A model that never closes its fence: generations run until max_tokens."""
    server = Server(tiny_models["loop"], home, "--queue", "1", "--max-tokens", "30000")
    yield server
    server.stop()


def messages(source: str = SOURCE) -> list[dict[str, str]]:
    conv = conversation(
        load_template(None), code=source, instruction="rename foo to bar", filename="calc.py",
        lang="python",
    )  # fmt: skip
    return conv.with_opening


def local_ar(folder: Path, msgs: list[dict[str, str]], stop: str) -> str:
    """Plain greedy decoding of the conversation, in this process, cut before ``stop``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from adapld_cli.edit.local import stop_token_ids
    from adapld_cli.engine import GenerationConfig, generate

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    loaded = type("L", (), {"model": model, "tokenizer": tok})()
    ids = tok(chat_text(tok, msgs), add_special_tokens=False)["input_ids"]
    cfg = GenerationConfig(max_new_tokens=200, stop_token_ids=stop_token_ids(loaded),
                           stop_strings=(stop,))  # fmt: skip
    text = tok.decode(generate(model, ids, cfg, "ar", tokenizer=tok).tokens,
                      skip_special_tokens=True)  # fmt: skip
    return text.split(stop)[0]


def stream_text(server: Server, **body) -> tuple[str, list[dict]]:
    chunks = []
    body = {"model": server.model, "stream": True, **body}
    with httpx.stream("POST", f"{server.url}/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [ln for ln in r.iter_lines() if ln]
    assert lines[-1] == "data: [DONE]"
    for line in lines[:-1]:
        assert line.startswith("data: ")
        chunks.append(json.loads(line[6:]))
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    return text, chunks


def test_answers_equal_local_plain_decoding(rename, tiny_models):
    """Non-streamed, streamed and four concurrent greedy answers are all local ar's text."""
    stop = "\n```"
    expected = local_ar(tiny_models["rename"], messages(), stop)
    assert expected == SOURCE.replace("foo", "bar").rstrip("\n")
    r = rename.chat(messages=messages(), temperature=0, stop=stop)
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": expected}
    assert body["choices"][0]["finish_reason"] == "stop"
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["adapld"]["method"] == "adapld" and usage["adapld"]["passes"] >= 1

    text, chunks = stream_text(rename, messages=messages(), temperature=0, stop=[stop],
                               stream_options={"include_usage": True})  # fmt: skip
    assert text == expected
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0

    answers: list[str] = []

    def ask() -> None:
        answers.append(rename.chat(messages=messages(), temperature=0, stop=stop).json()
                       ["choices"][0]["message"]["content"])  # fmt: skip

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert answers == [expected] * 4


def test_prediction_counters(rename):
    """The prediction's tokens split into accepted and rejected: the original file shares
    its unchanged lines with the answer, the answer itself is accepted whole."""
    answer = SOURCE.replace("foo", "bar").rstrip("\n")
    for prediction, all_accepted in ((SOURCE, False), (answer + "\n", True)):
        r = rename.chat(messages=messages(), temperature=0, stop="\n```",
                        prediction={"type": "content", "content": prediction})  # fmt: skip
        assert r.json()["choices"][0]["message"]["content"] == answer
        details = r.json()["usage"]["completion_tokens_details"]
        accepted, rejected = (details["accepted_prediction_tokens"],
                              details["rejected_prediction_tokens"])  # fmt: skip
        assert accepted > 0
        assert (rejected == 0) is all_accepted
    assert prediction_counts([1, 2, 3, 4], [1, 2, 9, 4]) == (3, 1)
    assert prediction_counts([], [1]) == (0, 0)


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b"[]", 400, "JSON object"),
        (b'{"model": "nope", "messages": [{"role": "user", "content": "x"}]}', 404, "nope"),
        (b'{"model": "M", "messages": []}', 400, "messages"),
        (b'{"model": "M", "messages": [{"role": "robot", "content": "x"}]}', 400, "role"),
        (b'{"model": "M", "messages": [{"role": "user", "content": "x"}], "max_tokens": -1}',
         400, "max_tokens"),
        (b'{"model": "M", "messages": [{"role": "user", "content": "x"}], "max_tokens": 99999}',
         400, "max_tokens"),
        (b'{"model": "M", "messages": [{"role": "user", "content": "x"}], "temperature": 9}',
         400, "temperature"),
        (b'{"model": "M", "messages": [{"role": "user", "content": "x"}], "n": 2}', 400, "n=1"),
        (b'{"model": "M", "messages": [{"role": "user", "content": "x"}], "stop": [1]}',
         400, "stop"),
    ],
)  # fmt: skip
def test_bad_requests_are_answered_and_survived(rename, body, status, needle):
    r = httpx.post(f"{rename.url}/chat/completions", timeout=30,
                   content=body.replace(b'"M"', f'"{rename.model}"'.encode()))  # fmt: skip
    assert r.status_code == status
    error = r.json()["error"]
    assert needle in error["message"] and set(error) == {"message", "type", "param", "code"}
    assert rename.health()["status"] == "ok"


def test_huge_body_unknown_route_and_method(rename):
    big = b'{"model": "x", "messages": "' + b"a" * (9 * 1024 * 1024) + b'"}'
    r = httpx.post(f"{rename.url}/chat/completions", content=big, timeout=60)
    assert r.status_code == 413 and "body" in r.json()["error"]["message"]
    assert httpx.get(f"{rename.url}/nothing", timeout=10).status_code == 404
    assert httpx.get(f"{rename.url}/chat/completions", timeout=10).status_code == 405
    models = httpx.get(f"{rename.url}/models", timeout=10).json()
    assert models["data"][0]["id"] == rename.model
    assert rename.chat(messages=messages(), temperature=0, stop="\n```").status_code == 200


def _wait_idle(server: Server, seconds: float = 20) -> None:
    """Wait until no request runs or waits. A generation left running would take minutes
    (30,000 tokens; 8,000 take ~15 s here), so this fails when cancelling does not work."""
    deadline = time.monotonic() + seconds
    while server.health()["requests"]:
        assert time.monotonic() < deadline, "the generation was not cancelled"
        time.sleep(0.1)


def test_disconnect_cancels_and_full_queue_is_503(looping):
    """A never-ending generation (up to the server's --max-tokens 30000) is cancelled when its
    client goes away mid-stream; with --queue 1, a third request gets 503 + Retry-After."""
    body = {"model": looping.model, "messages": messages(), "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{looping.url}/chat/completions", json=body, timeout=60) as r:
        lines = r.iter_lines()
        got = [next(lines) for _ in range(6)]
        assert any('"content"' in line for line in got)
    _wait_idle(looping)

    client = httpx.Client(timeout=60)
    streams = [client.stream("POST", f"{looping.url}/chat/completions", json=body)
               for _ in range(2)]  # fmt: skip
    opened = [s.__enter__() for s in streams]
    try:
        deadline = time.monotonic() + 30
        while looping.health()["requests"] < 2:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        r = looping.chat(messages=messages(), temperature=0, max_tokens=5)
        assert r.status_code == 503 and r.headers["retry-after"].isdigit()
        assert r.json()["error"]["code"] == "server_busy"
    finally:
        for s, o in zip(streams, opened, strict=True):
            s.__exit__(None, None, None)
            del o
        client.close()
    _wait_idle(looping)
    r = looping.chat(messages=messages(), temperature=0, max_tokens=5)
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "length"


def test_sigterm_during_generation_exits_0(tiny_models, home):
    server = Server(tiny_models["loop"], home)
    body = {"model": server.model, "messages": messages(), "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{server.url}/chat/completions", json=body, timeout=60) as r:
        lines = r.iter_lines()
        next(lines)
        server.proc.send_signal(signal.SIGTERM)
        assert server.stop() == 0


def test_api_key_and_loopback_rule(tiny_models, home, tmp_path):
    server = Server(tiny_models["rename"], home, "--api-key", "s3cret")
    try:
        assert httpx.get(f"{server.url}/models", timeout=10).status_code == 401
        r = httpx.get(f"{server.url}/models", headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        r = httpx.get(f"{server.url}/models", headers={"Authorization": "Bearer s3cret"})
        assert r.status_code == 200
        assert server.health()["status"] == "ok"  # open: for load balancers and scripts
        path = tmp_path / "calc.py"
        path.write_text(SOURCE)
        args = ["edit", str(path), "-i", "rename foo to bar", "--server", server.url]
        result = CliRunner().invoke(app, args, env={"ADAPLD_API_KEY": "wrong"})
        assert result.exit_code == 2
        assert result.stderr.strip().splitlines() == [
            f"adapld: error: the server at {server.url} answered 401: missing or wrong API key "
            "(Authorization: Bearer KEY)"
        ]
        result = CliRunner().invoke(app, args, env={"ADAPLD_API_KEY": "s3cret"})
        assert result.exit_code == 0, result.stderr
        assert path.read_text() == SOURCE.replace("foo", "bar")
    finally:
        assert server.stop() == 0
    result = CliRunner().invoke(app, ["serve", "--host", "0.0.0.0", "--model", "x"],
                                env={"ADAPLD_API_KEY": ""})  # fmt: skip
    assert result.exit_code == 2
    assert result.stderr == (
        "adapld: error: --host 0.0.0.0 is not a loopback address: set --api-key or "
        "$ADAPLD_API_KEY\n"
    )


def test_edit_through_the_server_checks_writes_and_undoes(rename, tiny_models, home, tmp_path,
                                                          monkeypatch):  # fmt: skip
    """The same edit as local: written, undone; a broken answer refused (exit 1) with the
    file untouched; an unreachable server exit 2 with one line."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "calc.py"
    path.write_text(SOURCE)
    runner = CliRunner()
    stats = tmp_path / "stats.json"
    result = runner.invoke(app, ["edit", "calc.py", "-i", "rename foo to bar", "--server",
                                 rename.url, "--stats-json", str(stats)])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert path.read_text() == SOURCE.replace("foo", "bar")
    assert "calc.py: edited — renamed foo -> bar" in result.stderr
    row = json.loads(stats.read_text())
    assert row["method"] == "server:adapld" and row["new_tokens"] > 0
    assert runner.invoke(app, ["undo"]).exit_code == 0
    assert path.read_text() == SOURCE

    monkeypatch.setenv("ADAPLD_SERVER", rename.url)
    result = runner.invoke(app, ["edit", "-", "-i", "rename foo to bar",
                                 "--stdin-filename", "calc.py"], input=SOURCE)  # fmt: skip
    assert result.exit_code == 0 and result.stdout == SOURCE.replace("foo", "bar")

    broken = Server(tiny_models["broken"], home)
    try:
        result = runner.invoke(app, ["edit", "calc.py", "-i", "rename foo to bar", "--server",
                                     broken.url])  # fmt: skip
    finally:
        broken.stop()
    assert result.exit_code == 1
    assert "refused after 2 attempts — the edited file does not parse" in result.stderr
    assert path.read_text() == SOURCE

    result = runner.invoke(app, ["edit", "calc.py", "-i", "x", "--server",
                                 "http://127.0.0.1:9/v1"])  # fmt: skip
    assert result.exit_code == 2 and path.read_text() == SOURCE
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith(
        "adapld: error: cannot reach the server at http://127.0.0.1:9/v1"
    )


def test_parse_chat_and_text_cutter(tiny_tokenizer):
    req = parse_chat(json.dumps({
        "model": "m", "messages": [{"role": "developer", "content": [{"type": "text",
        "text": "a"}, {"type": "text", "text": "b"}]}], "stop": "END", "max_completion_tokens": 3,
        "prediction": {"type": "content", "content": "p"}, "stream": True,
        "stream_options": {"include_usage": True},
    }).encode(), "m")  # fmt: skip
    assert req.messages == [{"role": "system", "content": "ab"}]
    assert (req.stop, req.max_tokens, req.prediction, req.temperature) == (("END",), 3, "p", 1.0)
    assert req.stream and req.include_usage
    with pytest.raises(ApiError) as err:
        parse_chat(b'{"model": "m", "messages": [{"role": "user", "content": [{"type": '
                   b'"image_url"}]}]}', "m")  # fmt: skip
    assert err.value.status == 400 and "text content" in err.value.message

    tok = tiny_tokenizer
    ids = tok("ab\n``", add_special_tokens=False)["input_ids"]
    cut = TextCutter(tok, ("\n```",))
    assert cut.piece(ids, final=False) == "ab"  # "\n``" may still become the stop string
    more = ids + tok("`tail", add_special_tokens=False)["input_ids"]
    assert cut.piece(more, final=False) == ""  # the stop string arrived: nothing after it
    assert cut.text(more) == ("ab", True)
    cut = TextCutter(tok, ("\n```",))
    assert cut.piece(ids, final=True) == "ab\n``"


def test_client_gone_before_the_stream_starts_frees_its_slot(looping):
    """A client that sends a streamed request and hangs up at once (its answer never starts)
    still cancels the never-ending generation and gives its queue slot back."""
    import socket
    import urllib.parse

    url = urllib.parse.urlsplit(looping.url)
    body = json.dumps({"model": looping.model, "messages": messages(), "temperature": 0,
                       "stream": True}).encode()  # fmt: skip
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {url.netloc}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    for _ in range(3):
        with socket.create_connection((url.hostname, url.port)) as sock:
            sock.sendall(head + body)
    _wait_idle(looping)
    r = looping.chat(messages=messages(), temperature=0, max_tokens=5)
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "length"


def test_verbose_logs_each_answers_timings(tiny_models, home):
    """With -v each answer's token counts and times go to stderr in one line, the second
    request's prompt taken over from the first (the prefix cache)."""
    server = Server(tiny_models["rename"], home, "-v")
    try:
        usages = [
            server.chat(messages=messages(), temperature=0, stop="\n```").json()["usage"]
            for _ in range(2)
        ]
        server.proc.send_signal(signal.SIGTERM)
        log = server.proc.stderr.read()  # to the end: the server exits
    finally:
        assert server.stop() == 0
    lines = [line for line in log.splitlines() if line.startswith("adapld serve: prompt")]
    assert len(lines) == 2, log
    for line, usage in zip(lines, usages, strict=True):
        cached = usage["prompt_tokens_details"]["cached_tokens"]
        assert f"prompt {usage['prompt_tokens']} tokens ({cached} cached)" in line
        assert f"answer {usage['completion_tokens']} tokens" in line
    assert usages[1]["prompt_tokens_details"]["cached_tokens"] > 0


def test_a_repair_by_parts_goes_through_the_server(rename, tmp_path, monkeypatch):
    """After the tests fail a result, the server is asked for the cause and a fixed file (no
    stop string, no opened fence), then, that answer failing the same way, for each
    definition the edit changed: the answer opened with its header, four stop strings (an
    OpenAI server's most); the tests failing still, the file is put back."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "calc.py"
    path.write_text(SOURCE)
    argv = ["edit", "calc.py", "-i", "rename foo to bar", "--server", rename.url]
    result = CliRunner().invoke(app, [*argv, "--test", "exit 1", "-v", "--attempts", "3"])
    assert result.exit_code == 1, result.stderr
    assert "Asking for the cause and a fixed file." in result.stderr
    assert "Asking again for bar, main." in result.stderr
    assert "tests failed after 3 attempts (last: exit 1: no output); file restored" in result.stderr
    assert path.read_text() == SOURCE
