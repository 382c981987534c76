"""Generation by a server: the same edit, with the model behind an OpenAI-compatible API.

Contract: :class:`RemoteModel` has :class:`~adapld_cli.edit.local.LocalModel`'s interface
(``context``, ``generate``) and returns the same
:class:`~adapld_cli.edit.request.Generation`: everything after generation (the judge, repairs,
write-back, journal, exit codes) is shared with local editing. The conversation is
``adapld edit``'s own: the template's messages, then the answer's opening (code fence) as an
assistant message to continue, which ``adapld serve`` and llama.cpp's server treat as a
prefill; a server that answers from scratch and repeats the opening gets it stripped. The
request streams (server-sent events), stops at the closing fence, and sends the file as an
OpenAI Predicted Output.

A server that cannot be reached, times out, answers an error or something that is not a
chat completion raises :class:`ServerError` (exit 2; nothing is written).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from adapld_cli.edit.errors import EditError
from adapld_cli.edit.prompt import Conversation, PromptTemplate, load_template
from adapld_cli.edit.request import EditOptions, Generation, PreparedEdit
from adapld_cli.engine.types import Source, Stats, StepEvent

ENV_SERVER = "ADAPLD_SERVER"
ENV_API_KEYS = ("ADAPLD_API_KEY", "OPENAI_API_KEY")
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 300.0  # longest wait for the next streamed piece (a long prefill included)
METHOD = "server"


class ServerError(EditError):
    """The server could not be used (exit 2, nothing written)."""


@dataclass(frozen=True)
class ServerConfig:
    """Where generation runs: ``url`` is the OpenAI base URL (``http://host:port/v1``)."""

    url: str
    api_key: str | None = None
    model: str | None = None  # None: the first model the server lists

    @classmethod
    def from_options(cls, url: str | None, model: str | None) -> ServerConfig | None:
        """``--server`` or ``$ADAPLD_SERVER`` (None when neither is set); the key from
        ``$ADAPLD_API_KEY``, else ``$OPENAI_API_KEY``."""
        url = url or os.environ.get(ENV_SERVER) or None
        if not url:
            return None
        key = next((os.environ[k] for k in ENV_API_KEYS if os.environ.get(k)), None)
        return cls(url=url.rstrip("/"), api_key=key, model=model)


class ChatClient:
    """A small OpenAI chat-completions client on httpx (streaming only)."""

    def __init__(self, config: ServerConfig) -> None:
        import httpx

        self.config = config
        headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self.http = httpx.Client(
            base_url=config.url,
            headers=headers,
            timeout=httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
        )

    def close(self) -> None:
        self.http.close()

    def model_id(self) -> str:
        """``config.model``, else the first model of ``GET /models``."""
        if self.config.model:
            return self.config.model
        data = self._json(self._call("GET", "/models"))
        try:
            return str(data["data"][0]["id"])
        except (KeyError, IndexError, TypeError):
            raise self._garbage("its model list") from None

    def stream(self, payload: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """The chunks of a streamed chat completion."""
        import httpx

        try:
            with self.http.stream("POST", "/chat/completions", json=payload) as response:
                if response.status_code >= 400:
                    response.read()
                    raise self._status(response)
                for line in response.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    try:
                        chunk = json.loads(data)
                    except ValueError:
                        raise self._garbage("a streamed chunk") from None
                    if not isinstance(chunk, dict):
                        raise self._garbage("a streamed chunk")
                    if "error" in chunk:
                        raise ServerError(f"the server at {self.config.url} failed: "
                                          f"{_message(chunk)}")  # fmt: skip
                    yield chunk
        except httpx.HTTPError as exc:
            raise self._transport(exc) from None

    def _call(self, method: str, path: str) -> Any:
        import httpx

        try:
            response = self.http.request(method, path)
        except httpx.HTTPError as exc:
            raise self._transport(exc) from None
        if response.status_code >= 400:
            raise self._status(response)
        return response

    def _json(self, response: Any) -> Any:
        try:
            return response.json()
        except ValueError:
            raise self._garbage("its answer") from None

    def _transport(self, exc: Exception) -> ServerError:
        import httpx

        url = self.config.url
        if isinstance(exc, httpx.TimeoutException):
            return ServerError(f"the server at {url} timed out ({type(exc).__name__})")
        if isinstance(exc, httpx.ConnectError):
            return ServerError(f"cannot reach the server at {url} ({exc})")
        return ServerError(f"the connection to the server at {url} failed ({exc})")

    def _status(self, response: Any) -> ServerError:
        try:
            detail = _message(response.json())
        except ValueError:
            detail = response.text.strip()[:200] or response.reason_phrase
        return ServerError(
            f"the server at {self.config.url} answered {response.status_code}: {detail}"
        )

    def _garbage(self, what: str) -> ServerError:
        return ServerError(
            f"the server at {self.config.url} sent something that is not an OpenAI chat "
            f"completion in {what}"
        )


def _message(data: Any) -> str:
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        return str(data["error"].get("message", data["error"]))
    return json.dumps(data)[:200]


class Pieces:
    """A stand-in tokenizer for the live panel: each streamed piece of text is one 'token'."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def add(self, text: str) -> int:
        self.texts.append(text)
        return len(self.texts) - 1

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(self.texts[i] for i in ids)


class RemoteModel:
    """Generates edits with the model behind a server (see the module contract)."""

    def __init__(
        self,
        client: ChatClient,
        options: EditOptions | None = None,
        template: PromptTemplate | str | None = None,
    ) -> None:
        self.client = client
        self.options = options or EditOptions()
        self.template = load_template(template)
        self.model = client.model_id()
        self.tokenizer = Pieces()
        self.method = METHOD
        self.context = None  # the server fits the prompt into its own context

    def close(self) -> None:
        self.client.close()

    def describe(self, prepared: PreparedEdit) -> str:
        return f"{prepared.source.name}: generated by {self.model} at {self.client.config.url}"

    def payload(self, prepared: PreparedEdit) -> dict[str, Any]:
        cfg = prepared.config
        body: dict[str, Any] = {
            "model": self.model,
            "messages": _conversation(prepared).with_opening,
            "temperature": cfg.temperature,
            "top_p": cfg.top_p,
            "stop": list(cfg.stop_strings),
            "stream": True,
            "stream_options": {"include_usage": True},
            "prediction": {"type": "content", "content": _prediction(prepared)},
        }
        if cfg.seed is not None:
            body["seed"] = cfg.seed
        if cfg.max_new_tokens:
            body["max_tokens"] = cfg.max_new_tokens
        return body

    def generate(
        self, prepared: PreparedEdit, on_event: Callable[[StepEvent], None] | None = None
    ) -> Generation:
        """Stream the answer from the server until it finishes."""
        stats = Stats(method=METHOD)
        parts: list[str] = []
        finish: str | None = None
        started = time.perf_counter()
        for chunk in self.client.stream(self.payload(prepared)):
            usage = chunk.get("usage")
            if isinstance(usage, dict):
                _usage(stats, usage)
            _progress(stats, chunk.get("adapld"))
            for choice in chunk.get("choices") or []:
                if not isinstance(choice, dict):
                    raise self.client._garbage("a streamed chunk")
                text = (choice.get("delta") or {}).get("content") or ""
                finish = choice.get("finish_reason") or finish
                if text:
                    parts.append(text)
                    if "adapld" not in chunk:
                        stats.new_tokens += 1
                        stats.forward_passes += 1
                    stats.decode_s = time.perf_counter() - started
                    if on_event is not None:
                        tid = self.tokenizer.add(text)
                        on_event(StepEvent([tid], [Source.MODEL], stats))
        stats.decode_s = time.perf_counter() - started - stats.prefill_s
        if finish is None:
            raise ServerError(
                f"the server at {self.client.config.url} ended the answer without a "
                "finish_reason (cut off)"
            )
        text = _strip_opening("".join(parts), prepared)
        reason = {"stop": "stop_string", "length": "max_new_tokens"}.get(finish, finish)
        return Generation(text=text, stats=stats, stop_reason=reason)


def _strip_opening(text: str, prepared: PreparedEdit) -> str:
    """The answer without the opening a server repeated (it did not continue the prefill)."""
    opening = _conversation(prepared).opening
    if text.startswith(opening):
        return text[len(opening) :]
    fence = prepared.prompt.fence
    if text.startswith(fence) and "\n" in text:
        return text[text.index("\n") + 1 :]
    return text


def _prediction(prepared: PreparedEdit) -> str:
    """The predicted output sent: a repair's rejected answer (closer to the next answer than
    the file, which the prompt carries anyway), else the file."""
    return _conversation(prepared).reference or prepared.source.text


def _conversation(prepared: PreparedEdit) -> Conversation:
    assert prepared.conversation is not None, "prepared by RemoteModel.prepare"
    return prepared.conversation


def _usage(stats: Stats, usage: dict[str, Any]) -> None:
    stats.prompt_tokens = int(usage.get("prompt_tokens") or 0)
    stats.new_tokens = int(usage.get("completion_tokens") or stats.new_tokens)
    _progress(stats, usage.get("adapld"))


def _progress(stats: Stats, counters: Any) -> None:
    """adapld serve's counters (an extension field; other servers do not send it)."""
    if not isinstance(counters, dict):
        return
    stats.method = f"{METHOD}:{counters.get('method', '?')}"
    stats.new_tokens = int(counters.get("tokens", stats.new_tokens))
    stats.forward_passes = int(counters.get("passes", stats.forward_passes))
    stats.accepted_draft_tokens = int(
        counters.get("accepted_draft_tokens", stats.accepted_draft_tokens)
    )
    stats.drafted_tokens = int(counters.get("drafted_tokens", stats.drafted_tokens))
    if "prefill_s" in counters:
        stats.prefill_s = float(counters["prefill_s"])
