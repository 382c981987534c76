"""The HTTP shell: a Starlette app over a :class:`~adapld_cli.serve.worker.Generator`.

Routes: ``POST /v1/chat/completions`` (JSON, or server-sent events with ``stream``),
``GET /v1/models``, ``GET /health`` (``requests``: running plus waiting). Contract:

- **Auth**: with an API key set, every ``/v1`` route needs ``Authorization: Bearer KEY``
  (compared in constant time); 401 otherwise. ``/health`` is open.
- **Limits**: a body over ``max_body`` bytes is 413 (read no further); one generation runs
  at a time, ``queue`` more wait; beyond that 503 with ``Retry-After``.
- **Errors** are OpenAI-style JSON (``{"error": {...}}``) with a 4xx/5xx status, and the
  server keeps serving; an unknown route is 404, a wrong method 405.
- **Disconnects**: a client that goes away (streaming or not) cancels its generation, queued
  or running, after the current decode step.
- **Edit checks** (``check_edits``: ``"off"``, ``"report"`` or ``"strict"``; ``adapld serve
  --check-edits`` / ``--strict-edits``): every finished answer goes through
  :func:`adapld_cli.edit.check_answer.check_answer`; its verdict is the top-level
  ``adapld.check`` object and the ``X-Adapld-Check`` header of a non-streamed answer, and the
  ``adapld.check`` of the streamed finish chunk (and usage chunk). ``"strict"`` answers a
  flagged one with a 400 ``edit_flagged`` error instead (streamed: an error event in place
  of the finish chunk). The check never fails a request: an error in it reads as not checked.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from adapld_cli.serve.protocol import (
    CHECK_HEADER,
    ApiError,
    check_header,
    chunk,
    completion,
    flagged_error,
    new_id,
    parse_chat,
    sse,
)
from adapld_cli.serve.worker import Generator, Job

RETRY_AFTER_S = 5
CheckEdits = Literal["off", "report", "strict"]


@dataclass(frozen=True)
class ServeLimits:
    api_key: str | None = None
    max_body: int = 8 * 1024 * 1024  # bytes
    queue: int = 8  # requests waiting behind the running one


def error_response(err: ApiError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


class Service:
    """The app's state: the generator, admission and auth."""

    def __init__(
        self, generator: Generator, limits: ServeLimits, check_edits: CheckEdits = "off"
    ) -> None:
        self.generator = generator
        self.limits = limits
        self.check_edits = check_edits
        self.admitted = 0  # running + queued requests (touched on the event loop only)

    # -- checks ------------------------------------------------------------------------
    def authorize(self, request: Request) -> None:
        key = self.limits.api_key
        if key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), key.encode()
        ):
            raise ApiError(
                401, "missing or wrong API key (Authorization: Bearer KEY)",
                type="authentication_error", code="invalid_api_key",
            )  # fmt: skip

    async def body(self, request: Request) -> bytes:
        """The request body, refused (413) as soon as it passes the limit."""
        limit = self.limits.max_body
        declared = request.headers.get("content-length")
        too_big = ApiError(413, f"the request body is over {limit} bytes", code="body_too_large")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise too_big
        data = bytearray()
        async for part in request.stream():
            data += part
            if len(data) > limit:
                raise too_big
        return bytes(data)

    def admit(self) -> None:
        if self.admitted >= 1 + self.limits.queue:
            raise ApiError(
                503,
                f"busy: one generation runs and {self.limits.queue} wait; retry later",
                type="server_error",
                code="server_busy",
            )
        self.admitted += 1

    # -- routes --------------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        return JSONResponse(
            {"status": "ok", "model": self.generator.model_id, "requests": self.admitted}
        )

    async def models(self, request: Request) -> Response:
        self.authorize(request)
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.generator.model_id,
                        "object": "model",
                        "created": 0,
                        "owned_by": "adapld",
                    }
                ],
            }
        )

    async def chat(self, request: Request) -> Response:
        self.authorize(request)
        parsed = parse_chat(await self.body(request), self.generator.model_id)
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[tuple] = asyncio.Queue()

        def post(item: tuple) -> None:  # called on the worker thread
            loop.call_soon_threadsafe(events.put_nowait, item)

        job = self.generator.job(parsed, post)
        self.admit()
        self.generator.submit(job)
        if parsed.stream:
            return _Events(self._stream(job, events), on_close=lambda: self.end(job))
        try:
            return await self._whole(request, job, events)
        finally:
            self.end(job)

    def end(self, job: Job) -> None:
        """A request is over, however it ended: cancel its job (a no-op once it is done) and
        give its admission slot back. Called once per admitted request."""
        job.cancel.set()
        self.admitted -= 1

    async def _whole(self, request: Request, job: Job, events: asyncio.Queue) -> Response:
        """Wait for the whole answer; a client gone meanwhile cancels it."""
        parts: list[str] = []
        cid, model = new_id(), job.request.model
        while True:
            try:
                item = await asyncio.wait_for(events.get(), timeout=0.5)
            except asyncio.TimeoutError:
                if await request.is_disconnected():
                    job.cancel.set()
                    return Response(status_code=499)
                continue
            except asyncio.CancelledError:
                job.cancel.set()
                raise
            if item[0] == "delta":
                parts.append(item[1])
            elif item[0] == "done":
                text = "".join(parts)
                body = completion(cid, model, text, item[1], item[2])
                return self._checked(body, await self.check(job, text, item[1]))
            else:
                raise ApiError(500, item[1], type="server_error")

    async def check(self, job: Job, text: str, finish_reason: str) -> dict[str, Any] | None:
        """The edit check of a finished answer as JSON; ``None`` when checks are off. Runs on
        a worker thread (it parses both files) so the event loop keeps serving."""
        if self.check_edits == "off":
            return None
        from starlette.concurrency import run_in_threadpool

        from adapld_cli.edit.check_answer import check_answer, not_checked

        try:
            verdict = await run_in_threadpool(
                check_answer, job.request.messages, text, finish_reason=finish_reason
            )
        except Exception as exc:  # a bug in the check must not cost the client its answer
            verdict = not_checked(f"the check failed: {type(exc).__name__}: {exc}")
        return verdict.as_json()

    def withheld(self, check: dict[str, Any] | None) -> bool:
        """Whether ``--strict-edits`` turns this answer into an error."""
        return check is not None and self.check_edits == "strict" and not check["ok"]

    def _checked(self, body: dict[str, Any], check: dict[str, Any] | None) -> Response:
        """A non-streamed answer with its check: the ``adapld.check`` field and header, or the
        strict error (which carries both too)."""
        if check is None:
            return JSONResponse(body)
        headers = {CHECK_HEADER: check_header(check)}
        if self.withheld(check):
            err = flagged_error(check)
            return JSONResponse(
                {**err.body(), "adapld": {"check": check}}, status_code=err.status, headers=headers
            )
        return JSONResponse({**body, "adapld": {"check": check}}, headers=headers)

    async def _stream(self, job: Job, events: asyncio.Queue) -> AsyncIterator[bytes]:
        """Server-sent events (the response ends the job: :class:`_Events`)."""
        cid, model = new_id(), job.request.model
        parts: list[str] = []
        yield sse(chunk(cid, model, {"role": "assistant", "content": ""}))
        while True:
            item = await events.get()
            if item[0] == "delta":
                parts.append(item[1])
                yield sse(chunk(cid, model, {"content": item[1]}, progress=item[2]))
                continue
            if item[0] == "done":
                usage = item[2]
                check = await self.check(job, "".join(parts), item[1])
                if self.withheld(check):
                    yield sse({**flagged_error(check).body(), "adapld": {"check": check}})
                    yield sse("[DONE]")
                    return
                extra = {} if check is None else {"check": check}
                yield sse(chunk(cid, model, {}, item[1], progress={**usage["adapld"], **extra}))
                if job.request.include_usage:
                    yield sse(chunk(cid, model, None, usage=usage, progress=extra or None))
            else:
                yield sse(ApiError(500, item[1], type="server_error").body())
            yield sse("[DONE]")
            return


class _Events(StreamingResponse):
    """Server-sent events that end their request however the response ends: the stream
    finished, the client gone mid-stream, or gone before the first event (where the event
    generator never starts, so a ``finally`` of its own would never run)."""

    def __init__(self, events: AsyncIterator[bytes], on_close: Any) -> None:
        super().__init__(
            events, media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )
        self.on_close = on_close

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.on_close()


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    headers = {"Retry-After": str(RETRY_AFTER_S)} if exc.status == 503 else None
    return error_response(exc, headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    kind = "not_found" if exc.status_code == 404 else "invalid_request_error"
    return error_response(ApiError(exc.status_code, str(exc.detail), type=kind))


async def _server_error(request: Request, exc: Exception) -> Response:
    return error_response(
        ApiError(500, f"internal error: {type(exc).__name__}: {exc}", type="server_error")
    )


def create_app(
    generator: Generator, limits: ServeLimits | None = None, *, check_edits: CheckEdits = "off"
) -> Starlette:
    """The ASGI app; the generator's worker starts with the app and stops with it.
    ``check_edits``: see the module contract."""
    service = Service(generator, limits or ServeLimits(), check_edits)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        generator.start()
        try:
            yield
        finally:
            generator.stop()

    app = Starlette(
        routes=[
            Route("/health", service.health, methods=["GET"]),
            Route("/v1/models", service.models, methods=["GET"]),
            Route("/v1/chat/completions", service.chat, methods=["POST"]),
        ],
        exception_handlers={
            ApiError: _api_error,
            HTTPException: _http_error,
            Exception: _server_error,
        },
        lifespan=lifespan,
    )
    app.state.service = service
    return app
