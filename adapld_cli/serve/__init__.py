"""`adapld serve`: an OpenAI-compatible HTTP API over the same engine `adapld edit` uses.

:mod:`~adapld_cli.serve.protocol` (the wire format, no heavy imports),
:mod:`~adapld_cli.serve.worker` (one generation at a time on a thread),
:mod:`~adapld_cli.serve.app` (the Starlette shell: routes, auth, limits, disconnects).
"""
