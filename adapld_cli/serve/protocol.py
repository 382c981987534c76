"""The OpenAI chat-completions wire format: requests parsed and checked, answers built.

Contract: :func:`parse_chat` turns a request body into a :class:`ChatRequest` or raises
:class:`ApiError` (status 4xx, an OpenAI-style ``error`` object with ``message``, ``type``,
``param``, ``code``). Nothing here imports torch or the web stack; the server
(:mod:`adapld_cli.serve.app`) and its tests use these functions directly.

Supported: ``model``, ``messages`` (string content or a list of text parts; a last
``assistant`` message is a prefill the answer continues), ``max_tokens`` /
``max_completion_tokens``, ``temperature`` (default 1, as OpenAI's), ``top_p``, ``seed``,
``stop`` (a string or up to 4), ``stream`` with ``stream_options.include_usage``, ``n`` = 1
and ``prediction`` (``{"type": "content", "content": string or text parts}``). Unknown fields
are ignored, as OpenAI-compatible servers do.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any

ROLES = ("system", "developer", "user", "assistant")
MAX_STOPS = 4


class ApiError(Exception):
    """An error answered as ``{"error": {...}}`` with HTTP ``status``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


@dataclass(frozen=True)
class ChatRequest:
    """A checked chat-completions request."""

    model: str
    messages: list[dict[str, str]]
    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stream: bool = False
    include_usage: bool = False
    prediction: str | None = None


def _bad(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def _text(content: Any, param: str) -> str:
    """Message content: a string, or a list of ``{"type": "text", "text": ...}`` parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise _bad(f"{param}: only text content parts are supported", param)
            text = part.get("text")
            if not isinstance(text, str):
                raise _bad(f"{param}: a text part needs a string 'text'", param)
            parts.append(text)
        return "".join(parts)
    raise _bad(f"{param} must be a string or a list of text parts", param)


def _number(body: dict, name: str, default: float, low: float, high: float) -> float:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise _bad(f"{name} must be a number from {low:g} to {high:g}", name)
    return float(value)


def _messages(raw: Any) -> list[dict[str, str]]:
    if not isinstance(raw, list) or not raw:
        raise _bad("messages must be a non-empty list", "messages")
    out = []
    for i, m in enumerate(raw):
        param = f"messages[{i}]"
        if not isinstance(m, dict):
            raise _bad(f"{param} must be an object", param)
        role = m.get("role")
        if role not in ROLES:
            raise _bad(f"{param}.role must be one of {', '.join(ROLES)}", f"{param}.role")
        role = "system" if role == "developer" else role
        out.append({"role": role, "content": _text(m.get("content"), f"{param}.content")})
    return out


def _max_tokens(body: dict) -> int | None:
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _bad(f"{name} must be a positive integer", name)
        return value
    return None


def _stop(raw: Any) -> tuple[str, ...]:
    if raw is None:
        return ()
    stops = [raw] if isinstance(raw, str) else raw
    if (
        not isinstance(stops, list)
        or len(stops) > MAX_STOPS
        or not all(isinstance(s, str) and s for s in stops)
    ):
        raise _bad(f"stop must be a non-empty string or a list of up to {MAX_STOPS}", "stop")
    return tuple(stops)


def _prediction(raw: Any) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or raw.get("type") != "content":
        raise _bad("prediction must be {'type': 'content', 'content': ...}", "prediction")
    return _text(raw.get("content"), "prediction.content")


def parse_chat(body: bytes, model_id: str) -> ChatRequest:
    """Parse and check a ``/v1/chat/completions`` body (see the module contract).
    ``model`` must be ``model_id`` (404 ``model_not_found`` otherwise)."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _bad(f"the body is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise _bad("the body must be a JSON object")
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model is required", "model")
    if model != model_id:
        raise ApiError(
            404,
            f"The model '{model}' does not exist; this server runs '{model_id}'",
            param="model",
            code="model_not_found",
        )
    n = data.get("n", 1)
    if n not in (1, None):
        raise _bad("only n=1 is supported", "n")
    seed = data.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise _bad("seed must be an integer", "seed")
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise _bad("stream must be a boolean", "stream")
    options = data.get("stream_options") or {}
    if not isinstance(options, dict):
        raise _bad("stream_options must be an object", "stream_options")
    top_p = _number(data, "top_p", 1.0, 0.0, 1.0)
    if top_p <= 0.0:
        raise _bad("top_p must be above 0", "top_p")
    return ChatRequest(
        model=model,
        messages=_messages(data.get("messages")),
        max_tokens=_max_tokens(data),
        temperature=_number(data, "temperature", 1.0, 0.0, 2.0),
        top_p=top_p,
        seed=seed,
        stop=_stop(data.get("stop")),
        stream=stream,
        include_usage=bool(options.get("include_usage", False)),
        prediction=_prediction(data.get("prediction")),
    )


def prediction_counts(prediction: list[int], completion: list[int]) -> tuple[int, int]:
    """``(accepted, rejected)`` prediction tokens: those of the prediction that appear in the
    completion (in order: the matching blocks of the two token sequences), and the rest."""
    if not prediction:
        return 0, 0
    matcher = SequenceMatcher(None, prediction, completion, autojunk=False)
    accepted = sum(block.size for block in matcher.get_matching_blocks())
    return accepted, len(prediction) - accepted


def new_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def completion(
    cid: str, model: str, text: str, finish_reason: str, usage: dict[str, Any]
) -> dict[str, Any]:
    """A non-streamed ``chat.completion`` object."""
    return {
        "id": cid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish_reason,
            }
        ],
        "usage": usage,
    }


def chunk(
    cid: str,
    model: str,
    delta: dict[str, Any] | None,
    finish_reason: str | None = None,
    *,
    usage: dict[str, Any] | None = None,
    progress: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``chat.completion.chunk`` (``delta=None``: the usage chunk, with no choices).
    ``progress``: adapld's running counters, an extension field clients may ignore."""
    out: dict[str, Any] = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": []
        if delta is None
        else [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }
    if usage is not None:
        out["usage"] = usage
    if progress is not None:
        out["adapld"] = progress
    return out


CHECK_HEADER = "X-Adapld-Check"
FLAGGED_STATUS = 400  # not 422: aider retries a 422 (docs/serve.md), and greedy answers repeat
FLAGGED_CODE = "edit_flagged"
_HEADER_CHARS = 300  # a header's reason is cut to this many characters


def check_header(check: dict[str, Any]) -> str:
    """The ``X-Adapld-Check`` value for a check (:meth:`AnswerCheck.as_json
    <adapld_cli.edit.check_answer.AnswerCheck.as_json>`): ``ok``, ``flagged; REASON`` or
    ``not checked; REASON``, on one line of printable ASCII (other characters become ``?``:
    header values are Latin-1 at best)."""
    reason = check.get("reason")
    if not reason:
        return str(check["status"])
    line = " ".join(str(reason).split())[:_HEADER_CHARS]
    line = "".join(c if " " <= c <= "~" else "?" for c in line)
    return f"{check['status']}; {line}"


def flagged_error(check: dict[str, Any]) -> ApiError:
    """The error a flagged answer becomes with ``--strict-edits``: 400, type
    ``invalid_response_error``, code ``edit_flagged``; the message says why. A client error
    that clients do not retry: the same request would get the same greedy answer, generated
    again for nothing (aider retries a 422; docs/serve.md)."""
    return ApiError(
        FLAGGED_STATUS,
        f"the answer was flagged and withheld (adapld serve --strict-edits): {check['reason']}",
        type="invalid_response_error",
        code=FLAGGED_CODE,
    )


def sse(data: dict[str, Any] | str) -> bytes:
    """One server-sent event carrying ``data`` (JSON, or a literal such as ``[DONE]``)."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {text}\n\n".encode()
