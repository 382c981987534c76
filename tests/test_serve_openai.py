"""`adapld serve` through the official ``openai`` Python SDK (a test extra), on the real server
process and the tiny scripted models of ``tests/test_serve.py``.

Chat completions with and without ``prediction``, streamed (with usage) and not, ``stop``,
``max_completion_tokens`` and ``seed``: greedy answers equal local plain decoding of the same
conversation, usage and prediction counters read through the SDK's own models, and errors
arrive as the SDK's exception types (400 ``BadRequestError``, 404 ``NotFoundError``, 503
``RateLimitError``... as the SDK maps them)."""

from __future__ import annotations

import pytest

from tests.conftest import SOURCE
from tests.test_serve import Server, local_ar, messages

openai = pytest.importorskip("openai")  # in the test extra: missing only outside it

STOP = "\n```"


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("serve-openai-home")


@pytest.fixture(scope="module")
def server(tiny_models, home):
    running = Server(tiny_models["rename"], home)
    yield running
    assert running.stop() == 0


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0) as sdk:
        yield sdk


def test_answer_equals_local_plain_decoding(server, client, tiny_models):
    expected = local_ar(tiny_models["rename"], messages(), STOP)
    answer = client.chat.completions.create(
        model=server.model, messages=messages(), temperature=0, stop=STOP, seed=1
    )
    choice = answer.choices[0]
    assert choice.message.content == expected and choice.finish_reason == "stop"
    assert answer.object == "chat.completion" and answer.model == server.model
    usage = answer.usage
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens > 0


def test_streamed_with_usage(server, client, tiny_models):
    expected = local_ar(tiny_models["rename"], messages(), STOP)
    stream = client.chat.completions.create(
        model=server.model, messages=messages(), temperature=0, stop=[STOP], stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == expected
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    plain = client.chat.completions.create(
        model=server.model, messages=messages(), temperature=0, stop=STOP, stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in plain if c.choices) == expected


def test_prediction_counters_through_the_sdk(server, client):
    answer = SOURCE.replace("foo", "bar").rstrip("\n")
    done = client.chat.completions.create(
        model=server.model, messages=messages(), temperature=0, stop=STOP,
        prediction={"type": "content", "content": SOURCE},
    )  # fmt: skip
    assert done.choices[0].message.content == answer
    details = done.usage.completion_tokens_details
    assert details.accepted_prediction_tokens > 0 and details.rejected_prediction_tokens > 0


def test_max_completion_tokens_stops_at_length(server, client):
    done = client.chat.completions.create(
        model=server.model, messages=messages(), temperature=0, max_completion_tokens=3
    )
    assert done.choices[0].finish_reason == "length" and done.usage.completion_tokens == 3


def test_errors_are_the_sdk_exception_types(server, client):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=messages())
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=server.model, messages=messages(), temperature=9)
    assert "temperature" in str(err.value)
    models = client.models.list()
    assert [m.id for m in models.data] == [server.model]
