#!/bin/bash
# aider's README edit through `adapld serve` and `llama-server` (same GGUF, same threads),
# each run on a freshly started server after one short warm-up request, alternated.
# Not in CI. docs/clients.md has the figures and what they mean.
#
#   LLAMA_SERVER=path/to/llama-server GGUF=coder-1.5b.gguf AIDER=path/to/aider \
#       bash scripts/bench/aider_servers.sh [first|after-another] [RUNS]
#
# (a llama-server built as a shared-library build needs its folder in LD_LIBRARY_PATH)
# (on a CPU with AMX tiles, llama.cpp 0.3.36 built with GGML_NATIVE=ON crashes in its AMX product:
# build it with the tiles off, as docs/clients.md says)
# Each server's log, with its timings per request, is left beside the work folder (printed).
# first: the rename is the server's first aider request; after-another: an aider edit of the
# same file ("Add a docstring to the low_stock method") runs first, untimed.
set -u
MODE=${1:-first}; RUNS=${2:-3}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
: "${LLAMA_SERVER:?path to llama-server}" "${GGUF:?path to the model GGUF}"
AIDER=${AIDER:-aider}; PY=${PYTHON:-python}
RENAME="Rename the method total_value to value and update every call"
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
cp "$ROOT/adapld_cli/data/inventory.py" "$WORK/"
git -C "$WORK" init -q && git -C "$WORK" add . && git -C "$WORK" -c user.name=b -c user.email=b@b commit -qm init
export OPENAI_API_KEY=unused

start() {  # $1 = adapld | llama; sets PORT and SRV
  if [ "$1" = adapld ]; then
    PORT=8123; (cd "$ROOT" && exec "$PY" -m adapld_cli serve --port $PORT --threads 2 --check-edits -v) >"$WORK.$1.log" 2>&1 &
  else
    PORT=8080; exec "$LLAMA_SERVER" -m "$GGUF" -t 2 -c 8192 --port $PORT --alias coder-1.5b --spec-type ngram-mod >"$WORK.$1.log" 2>&1 &
  fi
  SRV=$!
  until curl -sf localhost:$PORT/v1/models >/dev/null; do sleep 1; done
  curl -s localhost:$PORT/v1/chat/completions -H 'content-type: application/json' -d \
    '{"model":"coder-1.5b","messages":[{"role":"user","content":"Say hi."}],"max_tokens":8,"temperature":0}' >/dev/null
}
aider_run() {  # $1 = message; prints the wall time in seconds
  (cd "$WORK" && git reset -q --hard && git clean -qfdx -e .git &&
   local t0=$(date +%s.%N) &&
   "$AIDER" --model openai/coder-1.5b --openai-api-base http://127.0.0.1:$PORT/v1 \
       --edit-format whole --no-stream --no-show-model-warnings --yes-always --no-auto-commits \
       --no-check-update --no-analytics --message "$1" inventory.py >/dev/null 2>&1 &&
   printf "%.1f" "$(echo "$(date +%s.%N) - $t0" | bc)")
}
for i in $(seq "$RUNS"); do
  for s in adapld llama; do
    start $s
    [ "$MODE" = after-another ] && aider_run "Add a docstring to the low_stock method" >/dev/null
    echo "$s run $i: $(aider_run "$RENAME") s"
    kill $SRV; wait $SRV 2>/dev/null; sleep 2; echo "  ($s log: $WORK.$s.log)"
  done
done
