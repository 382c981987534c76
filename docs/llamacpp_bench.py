"""The llama.cpp rows of the README (not part of the package, not in CI).

Sends the prompts ``adapld edit`` builds for the six edit cases (``adapld_cli/bench/
edit_cases.jsonl``), as token ids, with the same token budget, to a running ``llama-server``
(``/completion``, greedy, no prompt cache) and prints one JSON line per case: tokens,
prefill and decode time from the server's own timings, wall time of the request, draft
statistics, and the output token ids (to compare plain and speculative runs). Run it alone
on the machine, against a server started on the default model's own GGUF::

    llama-server -m MODEL.gguf -t 2 -c 4096 --port 8080 [--spec-type ngram-simple]
    python docs/llamacpp_bench.py http://127.0.0.1:8080 > llama-plain.jsonl

How llama.cpp was built and the exact commands: README, Performance.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request


def main() -> None:
    from adapld_cli.bench.tasks import load_tasks
    from adapld_cli.edit import decode_source
    from adapld_cli.edit.session import EditSession
    from adapld_cli.model import load

    url = sys.argv[1].rstrip("/") + "/completion"
    session = EditSession(load("coder-1.5b", device="cpu"))
    for task in load_tasks("adapld_cli/bench/edit_cases.jsonl"):
        source = decode_source(task.before.encode("utf-8"), task.filename)
        prep = session.prepare(source, task.instruction)
        body = {
            "prompt": prep.prompt.ids,
            "n_predict": prep.config.max_new_tokens,
            "temperature": 0.0,
            "top_k": 1,
            "cache_prompt": False,
            "return_tokens": True,
        }
        request = urllib.request.Request(
            url, json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        start = time.perf_counter()
        with urllib.request.urlopen(request, timeout=3600) as response:
            reply = json.load(response)
        wall = time.perf_counter() - start
        timings = reply.get("timings", {})
        print(
            json.dumps(
                {
                    "task": task.name,
                    "prompt_tokens": len(prep.prompt.ids),
                    "tokens": timings.get("predicted_n"),
                    "prefill_s": round(timings.get("prompt_ms", 0) / 1e3, 2),
                    "decode_s": round(timings.get("predicted_ms", 0) / 1e3, 2),
                    "wall_s": round(wall, 2),
                    "draft_n": timings.get("draft_n"),
                    "draft_accepted": timings.get("draft_n_accepted"),
                    "ids": reply.get("tokens"),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
