"""The load check of docs/serve.md, "Under load" (not part of the package, not in CI).

Against a running server (``adapld serve --port 8123``): 20 sequential and 4 concurrent chat
requests (40 tokens each, greedy) and 10 bad ones; prints each bad request's status, then
computes the 24 answers by local plain decoding (``ar``, the same rendering as the server)
and prints how many are identical::

    python scripts/bench/serve_load.py http://127.0.0.1:8123/v1
"""

from __future__ import annotations

import sys
import threading
import time

import httpx

MODEL = "coder-1.5b"


def prompt(i: int) -> str:
    return f"Write a Python function named f{i} that returns {i} squared. Reply with code only."


def ask(url: str, text: str) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "temperature": 0,
            "max_tokens": 40}  # fmt: skip
    return httpx.post(f"{url}/chat/completions", json=body, timeout=600)


def served(url: str) -> dict[int, str]:
    answers: dict[int, str] = {}
    start = time.time()
    for i in range(20):
        r = ask(url, prompt(i))
        assert r.status_code == 200, r.text
        answers[i] = r.json()["choices"][0]["message"]["content"]
    print(f"20 sequential: ok in {time.time() - start:.1f} s", flush=True)
    replies: dict[int, httpx.Response] = {}
    threads = [threading.Thread(target=lambda i=i: replies.__setitem__(i, ask(url, prompt(i))))
               for i in range(20, 24)]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, r in replies.items():
        assert r.status_code == 200, r.text
        answers[i] = r.json()["choices"][0]["message"]["content"]
    print("4 concurrent: ok", flush=True)
    return answers


def bad_requests(url: str) -> None:
    user = [{"role": "user", "content": "x"}]
    cases = [
        ("malformed json", {"content": b"{not json"}),
        ("no messages", {"json": {"model": MODEL}}),
        ("unknown model", {"json": {"model": "nope", "messages": user}}),
        ("negative max_tokens", {"json": {"model": MODEL, "max_tokens": -1, "messages": user}}),
        ("huge body", {"content": b"x" * (9 * 1024 * 1024)}),
        ("bad role", {"json": {"model": MODEL, "messages": [{"role": "robot", "content": "x"}]}}),
        ("n=2", {"json": {"model": MODEL, "n": 2, "messages": user}}),
        ("string temperature", {"json": {"model": MODEL, "temperature": "hot", "messages": user}}),
        ("messages not a list", {"json": {"model": MODEL, "messages": "hi"}}),
        ("huge max_tokens", {"json": {"model": MODEL, "max_tokens": 10**9, "messages": user}}),
    ]
    for name, kw in cases:
        headers = {"content-type": "application/json"}
        r = httpx.post(f"{url}/chat/completions", timeout=60, headers=headers, **kw)
        ok = 400 <= r.status_code < 500 and "error" in r.json()
        print(f"bad {name}: {r.status_code} {'ok' if ok else 'NOT AN OPENAI 4xx'}", flush=True)
    print("health:", httpx.get(url[: -len("/v1")] + "/health", timeout=10).json(), flush=True)


def local_ar(answers: dict[int, str]) -> None:
    from adapld_cli.edit.local import stop_token_ids
    from adapld_cli.edit.prompt import chat_text
    from adapld_cli.engine import GenerationConfig, generate
    from adapld_cli.model import load

    lm = load(MODEL)
    tok = lm.tokenizer
    config = GenerationConfig(max_new_tokens=40, stop_token_ids=stop_token_ids(lm))
    same = 0
    for i, answer in answers.items():
        text = chat_text(tok, [{"role": "user", "content": prompt(i)}])
        ids = tok(text, add_special_tokens=False)["input_ids"]
        out = generate(lm.model, ids, config, "ar", tokenizer=tok)
        same += tok.decode(out.tokens, skip_special_tokens=True) == answer
    print(f"{same}/{len(answers)} identical to local plain decoding")


def main() -> None:
    url = sys.argv[1].rstrip("/")
    answers = served(url)
    bad_requests(url)
    local_ar(answers)


if __name__ == "__main__":
    main()
