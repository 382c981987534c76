"""`adapld serve`: the model, loaded once, behind an OpenAI-compatible API.

Contract: checks the options (a non-loopback ``--host`` needs an API key), binds the port,
loads the model, prints one line on stderr naming the base URL, then serves
(:mod:`adapld_cli.serve.app`) until SIGINT (exit 130) or SIGTERM (exit 0: requests in
flight get ``GRACE_S`` seconds to finish, then are cancelled). Errors before serving (bad
options, port in use, model error): one line on stderr, exit 2.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
from typing import Annotated, Any

import typer

from adapld_cli.cli.app import app
from adapld_cli.cli.helpfmt import PlainHelpCommand
from adapld_cli.cli.options import DeviceOpt, DtypeOpt, ModelOpt, ThreadsOpt, WeightsOpt
from adapld_cli.engine.methods import METHOD_HELP, Method

ENV_API_KEY = "ADAPLD_API_KEY"
GRACE_S = 10  # seconds requests in flight get to finish after SIGTERM

HELP = (
    "Serve the model over an OpenAI-compatible API: adapld serve [--port 8000].\n\n"
    "The model loads once and stays warm, so `adapld edit --server URL` (and any OpenAI "
    "client) skips the load. POST /v1/chat/completions takes messages, max_tokens, "
    "temperature, top_p, seed, stop, stream and prediction (OpenAI's Predicted Outputs: "
    "AdaPLD drafts from it, and the usage counts accepted and rejected prediction tokens); "
    "GET /v1/models and GET /health. Greedy answers are exactly plain decoding's. One "
    "generation runs at a time; --queue more wait, others get 503."
)
EPILOG = (
    "Examples:\n\n"
    "  adapld serve                                     (http://127.0.0.1:8000/v1)\n\n"
    "  adapld edit app.py -i 'rename foo to bar' --server http://127.0.0.1:8000/v1\n\n"
    "  ADAPLD_API_KEY=secret adapld serve --host 0.0.0.0   (other hosts need the key)\n\n"
    "Binds to loopback by default; any other --host needs --api-key or $ADAPLD_API_KEY, "
    "sent by clients as 'Authorization: Bearer KEY'. Exit codes: 0 stopped by SIGTERM · "
    "2 bad options, port in use or model error · 130 Ctrl-C."
)

_SRV = "Server"
_CHECK_NOTE = {"off": "", "report": "; edits checked", "strict": "; flagged edits withheld"}


def _opt(*names: str, help: str, **kw: Any) -> Any:
    kw.setdefault("rich_help_panel", _SRV)
    return typer.Option(*names, help=help, **kw)


@app.command(help=HELP, epilog=EPILOG, cls=PlainHelpCommand)
def serve(
    host: Annotated[str, _opt("--host", metavar="HOST", help="Address to bind.")] = "127.0.0.1",
    port: Annotated[
        int, _opt("--port", min=0, max=65535, metavar="N", help="Port (0: any free one).")
    ] = 8000,
    api_key: Annotated[
        str | None,
        _opt(
            "--api-key",
            metavar="KEY",
            envvar=ENV_API_KEY,
            show_envvar=False,
            show_default=False,
            help="Require 'Authorization: Bearer KEY' on /v1 routes. Default: $ADAPLD_API_KEY.",
        ),
    ] = None,
    queue: Annotated[
        int, _opt("--queue", min=0, metavar="N", help="Requests that may wait for the model.")
    ] = 8,
    max_body: Annotated[
        int, _opt("--max-body", min=1024, metavar="BYTES", help="Largest request body.")
    ] = 8 * 1024 * 1024,
    max_tokens: Annotated[
        int, _opt("--max-tokens", min=1, metavar="N", help="Most tokens one answer may have.")
    ] = 8192,
    method: Annotated[Method, _opt("--method", help=METHOD_HELP)] = Method.adapld,
    model: ModelOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = "auto",
    weights: WeightsOpt = None,
    threads: ThreadsOpt = None,
    check_edits: Annotated[
        bool,
        _opt(
            "--check-edits",
            help="Check an answer that replaces a file the conversation carried (aider's whole "
            "format: the path line, then the file in a fence) with adapld edit's parse check "
            "and scope guard; the verdict is the answer's adapld.check field and its "
            "X-Adapld-Check header (ok, flagged; REASON, not checked; REASON). Never changes "
            "the answer. See docs/serve.md.",
        ),
    ] = False,
    strict_edits: Annotated[
        bool,
        _opt(
            "--strict-edits",
            help="Like --check-edits, but a flagged answer is withheld: a 400 error with code "
            "edit_flagged (streamed: an error event in place of the finish chunk).",
        ),
    ] = False,
    verbose: Annotated[
        bool,
        _opt(
            "--verbose",
            "-v",
            help="Log every request (uvicorn's access log) and each answer's timings.",
        ),
    ] = False,
) -> None:
    """Serve the model (help text: ``HELP`` above)."""
    if not _loopback(host) and not api_key:
        _fail(f"--host {host} is not a loopback address: set --api-key or ${ENV_API_KEY}")
    sock = _bind(host, port)
    generator = _load(model, device, dtype, weights, threads, method.value, max_tokens)
    if verbose:
        generator.log = lambda line: typer.echo(line, err=True)
    from adapld_cli.serve.app import ServeLimits, create_app

    limits = ServeLimits(api_key=api_key or None, max_body=max_body, queue=queue)
    checks = "strict" if strict_edits else "report" if check_edits else "off"
    bound = sock.getsockname()
    shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    typer.echo(
        f"adapld serve: {generator.model_id} at http://{shown}:{bound[1]}/v1 "
        f"(method {method.value}{_CHECK_NOTE[checks]}; Ctrl-C or SIGTERM stops)",
        err=True,
    )
    _run(create_app(generator, limits, check_edits=checks), sock, verbose)
    raise typer.Exit(0)


def _fail(message: str) -> None:
    typer.echo(f"adapld: error: {message}", err=True)
    raise typer.Exit(2)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the model loads (a taken port fails fast)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family = infos[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(infos[0][4])
        sock.listen(128)
    except OSError as exc:
        _fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    return sock


def _load(
    spec: str | None,
    device: str | None,
    dtype: str,
    weights: str | None,
    threads: int | None,
    method: str,
    max_tokens: int,
) -> Any:
    from adapld_cli.edit.run import ModelConfig, load_model
    from adapld_cli.model.errors import ModelError
    from adapld_cli.serve.worker import Generator

    config = ModelConfig(spec=spec, device=device, dtype=dtype, threads=threads, weights=weights)
    try:
        loaded, _ = load_model(config)
    except ModelError as exc:
        _fail(str(exc))
    return Generator(loaded, method=method, max_tokens=max_tokens)


def _run(asgi: Any, sock: socket.socket, verbose: bool) -> None:
    """Serve on ``sock`` until a signal. uvicorn re-raises the signal it stopped for once it
    has shut down: SIGTERM then lands on a handler that does nothing (exit 0); SIGINT on
    Python's, which makes it exit 130."""
    import uvicorn

    from adapld_cli.ui.console import plain_output

    config = uvicorn.Config(
        asgi,
        log_level="info" if verbose else "warning",
        access_log=verbose,
        use_colors=False if plain_output() or not os.isatty(2) else None,
        timeout_graceful_shutdown=GRACE_S,
        lifespan="on",
    )
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
