#!/usr/bin/env bash
# The GPU issue's checks in one call on a lent device (not part of the package, not in CI).
# Run from the repository root once the GPU kit's calls have put its wheels and the model's
# GGUF parts in /tmp/kit:
#
#   bash docs/gpu_check.sh [CANITEDIT.jsonl]
#
# Installs the wheels, prepares the model, then runs each check under its own timeout, in the
# order of what a session most needs, with its output teed to $OUT (default /tmp/out):
#   1. verify-cost.log  the cost of a pass over n = 1..64 tokens (adapld bench --verify-cost)
#   2. profile/         torch.profiler over 50 ar steps and 20 adapld passes (docs/gpu_profile.py)
#   3. cases.json       the six edit cases, ar,hf,hf-pld,adapld: the README's GPU table
#   4. canitedit.json   ar,adapld on CanItEdit 21-40 (when a task file is given): identity
# About 9 minutes in all on an H200 with coder-1.5b; a step that runs out of time is cut and
# the next one starts. Every step's exit status is in $OUT/steps.txt.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
tasks=${1:-}
step() {  # step NAME SECONDS COMMAND...: run it under a timeout, log, record the status
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t0)) s" | tee -a "$OUT/steps.txt"
}

python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site /tmp/kit/whl/*.whl
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH HF_HUB_OFFLINE=1 ADAPLD_HOME=/tmp/ah CI=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)" \
  >> "$OUT/gpu.txt" 2>&1
cat /tmp/kit/part.* > /tmp/m.gguf
step prepare 150 adapld model prepare --model /tmp/m.gguf
model=(--model /tmp/m.gguf --device cuda)
step verify-cost 60 adapld bench "${model[@]}" --verify-cost
step profile 120 python3 docs/gpu_profile.py "${model[@]}" --out "$OUT/profile"
step cases 240 adapld bench "${model[@]}" --tasks adapld_cli/bench/edit_cases.jsonl \
  --methods ar,hf,hf-pld,adapld --json "$OUT/cases.json" --markdown "$OUT/cases.md"
if [ -n "$tasks" ]; then
  step canitedit 150 adapld bench "${model[@]}" --tasks "$tasks" --offset 20 --limit 20 \
    --methods ar,adapld --json "$OUT/canitedit.json" --markdown "$OUT/canitedit.md"
fi
exit 0
