"""`adapld serve --check-edits` / `--strict-edits`: an answer that replaces a file the
conversation carried goes through ``adapld edit``'s parse check and scope guard.

The decision (:func:`adapld_cli.edit.check_answer.check_answer`) on aider-style conversations
(the path on a line, then the file in a fence): a unified diff in the fence is flagged, a
whole-file rename is not, a conversation without code or an answer that is prose or a
snippet is not checked; the six built-in edit cases' reference edits are never flagged. Then
the real server process on tiny scripted models (``tests/test_serve.py``'s scaffolding): the
``X-Adapld-Check`` header and the ``adapld.check`` field, streamed and not, and the strict
mode's 400 error.
"""

from __future__ import annotations

import difflib
import json

import httpx
import pytest

from adapld_cli.edit.check_answer import check_answer, fenced_blocks
from adapld_cli.serve.protocol import check_header
from tests.conftest import RENAMED, SOURCE
from tests.scripted import build_models
from tests.test_edit_cases import load_cases
from tests.test_serve import Server

DIFF = "".join(
    difflib.unified_diff(
        SOURCE.splitlines(keepends=True),
        RENAMED.splitlines(keepends=True),
        "a/calc.py",
        "b/calc.py",
    )
)
SYSTEM = {"role": "system", "content": "Act as an expert software developer."}


def aider(code: str, instruction: str, path: str = "calc.py") -> list[dict[str, str]]:
    """An aider "whole" request: the instruction, then the path and the file in a fence."""
    return [SYSTEM, {"role": "user", "content": f"{instruction}\n\n{path}\n```\n{code}```\n"}]


def whole(code: str, path: str = "calc.py") -> str:
    """An answer in aider's whole format."""
    return f"{path}\n```\n{code}```\n"


# -- the decision ------------------------------------------------------------------------------
def test_a_diff_written_over_the_file_is_flagged():
    check = check_answer(aider(SOURCE, "rename foo to bar"), whole(DIFF))
    assert check.status == "flagged" and check.file == "calc.py" and check.language == "python"
    assert check.reason.startswith("the answer does not parse")


def test_a_whole_file_rename_is_ok():
    check = check_answer(aider(SOURCE, "rename foo to bar"), whole(RENAMED))
    assert check.status == "ok" and check.reason is None
    assert check.as_json() == {
        "status": "ok", "checked": True, "ok": True, "reason": None, "file": "calc.py",
        "language": "python",
    }  # fmt: skip


def test_a_file_that_loses_a_function_is_flagged_by_the_scope_guard():
    cut = "def foo(a, b):\n    return a + b\n"
    check = check_answer(aider(SOURCE, "add a docstring to foo"), whole(cut))
    assert check.flagged and "would delete main" in check.reason


def test_no_code_and_prose_are_not_checked():
    """No code in the conversation: nothing to compare. Unfenced prose: not checked, never
    flagged (aider's whole format writes fenced blocks only; a chat client asking about its
    code gets prose answers that nobody writes over the file)."""
    plain = check_answer([SYSTEM, {"role": "user", "content": "What is a closure?"}], whole(DIFF))
    assert plain.status == "not checked" and "no fenced code" in plain.reason
    assert check_answer([SYSTEM], "hello").status == "not checked"
    prose = check_answer(aider(SOURCE, "what does foo do?"), "It adds its two arguments.")
    assert prose.status == "not checked" and not prose.flagged and prose.as_json()["ok"]
    assert "no code fence" in prose.reason


def test_an_unlabelled_block_counts_only_when_it_is_the_whole_file():
    """A fence without the path line: a snippet is not checked; a version of the whole file
    (at least half its lines kept) is, and so is an unfenced whole file."""
    msgs = aider(SOURCE, "make foo return a - b")
    snippet = "Change foo:\n```python\ndef foo(a, b):\n    return a - b\n```\n"
    assert check_answer(msgs, snippet).status == "not checked"
    assert check_answer(msgs, f"```python\n{RENAMED}```\n").status == "ok"
    assert check_answer(msgs, RENAMED).status == "ok"
    broken = SOURCE.replace("print(foo(1, 2))", "print(foo(1, 2)")
    assert check_answer(msgs, f"Here:\n```python\n{broken}```\n").flagged


def test_aider_sends_the_files_before_the_instruction():
    """aider's own layout: the files in an earlier user message (labelled), the instruction
    alone in the last one; the answer's path picks the file among several."""
    other = "x = 1\n"
    files = f"Files:\n\nutil.py\n```\n{other}```\n\ncalc.py\n```\n{SOURCE}```\n"
    msgs = [
        SYSTEM,
        {"role": "user", "content": files},
        {"role": "assistant", "content": "Ok."},
        {"role": "user", "content": "rename foo to bar"},
    ]  # fmt: skip
    assert check_answer(msgs, whole(RENAMED)).status == "ok"
    flagged = check_answer(msgs, whole(DIFF))
    assert flagged.flagged and flagged.file == "calc.py"
    assert check_answer(msgs, whole("x = 2\n", "util.py")).status == "ok"


def test_a_prefill_opens_the_file_and_the_token_limit_cuts_it():
    """The request's last assistant message is the answer's start (``adapld edit --server``
    opens the fence there): the answer is the file even unlabelled and without its closing
    fence; cut at the token limit, it is flagged as ``adapld edit`` refuses it."""
    msgs = [*aider(SOURCE, "rename foo to bar"), {"role": "assistant", "content": "```python\n"}]
    assert check_answer(msgs, RENAMED, finish_reason="stop").status == "ok"
    cut = check_answer(msgs, RENAMED[:20], finish_reason="length")
    assert cut.flagged and "token limit" in cut.reason


def test_fenced_blocks_and_the_header():
    blocks = fenced_blocks("intro\n**src/a.py**\n````py\nx = '```'\n````\nmore\n~~~\nopen")
    assert [(b.path, b.tag, b.code, b.closed) for b in blocks] == [
        ("src/a.py", "py", "x = '```'\n", True),
        ("more", "", "open\n", False),  # a one-word line: a path only if one carried matches
    ]
    assert check_header({"status": "ok", "reason": None}) == "ok"
    reason = "the answer does not parse (line 3: near 'é')\nsecond line"
    assert check_header({"status": "flagged", "reason": reason}) == (
        "flagged; the answer does not parse (line 3: near '?') second line"
    )


@pytest.mark.parametrize("kind", ["instruction_descriptive", "instruction_lazy"])
def test_no_false_flags_on_the_edit_cases(kind):
    """The six built-in cases' reference edits, sent and answered as aider would: none
    flagged, every one checked."""
    for case in load_cases():
        path = f"{case['name']}.py"
        msgs = aider(case["before"], case[kind], path)
        check = check_answer(msgs, whole(case["after"], path))
        assert check.status == "ok", (case["name"], check.reason)


# -- the server --------------------------------------------------------------------------------
PREFILL = "calc.py\n```\n"  # the answer's start: the scripted models answer after a fence


def request(server: Server, msgs: list[dict[str, str]], **body) -> dict:
    return {
        "model": server.model,
        "messages": [*msgs, {"role": "assistant", "content": PREFILL}],
        "temperature": 0,
        **body,
    }


def post(server: Server, msgs: list[dict[str, str]], **body) -> httpx.Response:
    return httpx.post(
        f"{server.url}/chat/completions", json=request(server, msgs, **body), timeout=60
    )


def stream_events(server: Server, msgs: list[dict[str, str]]) -> list[dict]:
    body = request(server, msgs, stream=True, stream_options={"include_usage": True})
    with httpx.stream("POST", f"{server.url}/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        lines = [ln for ln in r.iter_lines() if ln]
    assert lines[-1] == "data: [DONE]"
    return [json.loads(ln[len("data: ") :]) for ln in lines[:-1]]


@pytest.fixture(scope="module")
def models(tmp_path_factory, tiny_models):
    root = tmp_path_factory.mktemp("check-models")
    return {"rename": tiny_models["rename"], **build_models(root, {"diff": DIFF}, (SOURCE,))}


@pytest.fixture(scope="module")
def servers(models, tmp_path_factory):
    """Started on first use, stopped (SIGTERM, exit 0) at the end."""
    home = tmp_path_factory.mktemp("check-home")
    running: dict[str, Server] = {}

    def get(model: str, *args: str) -> Server:
        key = f"{model} {' '.join(args)}"
        if key not in running:
            running[key] = Server(models[model], home, *args)
        return running[key]

    yield get
    assert all(server.stop() == 0 for server in running.values())


def test_the_server_reports_a_flagged_answer(servers):
    server = servers("diff", "--check-edits")
    answer = post(server, aider(SOURCE, "rename foo to bar"))
    assert answer.status_code == 200
    body = answer.json()
    assert body["choices"][0]["message"]["content"] == DIFF + "```"  # the answer, untouched
    check = body["adapld"]["check"]
    assert check["status"] == "flagged" and check["ok"] is False and check["file"] == "calc.py"
    assert answer.headers["x-adapld-check"].startswith("flagged; the answer does not parse")
    events = stream_events(server, aider(SOURCE, "rename foo to bar"))
    finish = next(e for e in events if e["choices"] and e["choices"][0]["finish_reason"])
    assert finish["adapld"]["check"] == check and "tokens" in finish["adapld"]
    assert events[-1]["usage"] and events[-1]["adapld"]["check"] == check


def test_the_server_reports_ok_and_not_checked(servers):
    server = servers("rename", "--check-edits")
    ok = post(server, aider(SOURCE, "rename foo to bar"))
    assert ok.status_code == 200 and ok.headers["x-adapld-check"] == "ok"
    assert ok.json()["adapld"]["check"]["status"] == "ok"
    chat = post(server, [SYSTEM, {"role": "user", "content": "write a calculator"}])
    assert chat.headers["x-adapld-check"] == "not checked; the conversation carries no fenced code"
    assert chat.json()["adapld"]["check"]["checked"] is False


def test_strict_withholds_a_flagged_answer(servers):
    server = servers("diff", "--strict-edits")
    refused = post(server, aider(SOURCE, "rename foo to bar"))
    assert refused.status_code == 400
    body = refused.json()
    assert body["error"]["code"] == "edit_flagged" and body["error"]["type"]
    assert "does not parse" in body["error"]["message"] and "choices" not in body
    assert body["adapld"]["check"]["status"] == "flagged"
    assert refused.headers["x-adapld-check"].startswith("flagged; ")
    events = stream_events(server, aider(SOURCE, "rename foo to bar"))
    assert events[-1]["error"]["code"] == "edit_flagged"
    assert not any(e.get("choices") and e["choices"][0]["finish_reason"] for e in events)
    passed = post(server, [SYSTEM, {"role": "user", "content": "write a calculator"}])
    assert passed.status_code == 200 and passed.headers["x-adapld-check"].startswith("not checked")
    assert server.health()["requests"] == 0


def test_off_by_default(servers):
    server = servers("diff")
    answer = post(server, aider(SOURCE, "rename foo to bar"))
    assert answer.status_code == 200 and "x-adapld-check" not in answer.headers
    assert "adapld" not in answer.json()


def test_the_openai_sdk_keeps_the_check_and_raises_on_strict(servers):
    """The extra key survives the official SDK's models; strict's 400 is its
    ``BadRequestError`` (a 422 would be retried by aider)."""
    openai = pytest.importorskip("openai")  # in the test extra: missing only outside it
    msgs = [*aider(SOURCE, "rename foo to bar"), {"role": "assistant", "content": PREFILL}]
    report = servers("diff", "--check-edits")
    with openai.OpenAI(base_url=report.url, api_key="unused", max_retries=0) as sdk:
        answer = sdk.chat.completions.create(model=report.model, messages=msgs, temperature=0)
    assert answer.model_extra["adapld"]["check"]["status"] == "flagged"
    strict = servers("diff", "--strict-edits")
    sdk = openai.OpenAI(base_url=strict.url, api_key="unused", max_retries=0)
    with sdk, pytest.raises(openai.BadRequestError) as raised:
        sdk.chat.completions.create(model=strict.model, messages=msgs, temperature=0)
    assert raised.value.code == "edit_flagged"
