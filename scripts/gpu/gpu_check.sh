#!/usr/bin/env bash
# The GPU issue's checks in one call on a lent device (not part of the package, not in CI).
# Run from the repository root once the GPU kit's calls have put its wheels and the model's
# GGUF parts in /tmp/kit:
#
#   bash scripts/gpu/gpu_check.sh [1|2|3|4] [CANITEDIT.jsonl]
#
# The call after the kit's, as made on 2026-12-04 (copy ../shared/bench/canitedit.jsonl to
# .gpu-kit/, carry it and name it as the 2nd argument):
#   mkdir -p /tmp/o; PACK=$OUT/all.tgz OUT=/tmp/o BUDGET=540 KIT=/tmp/kit \
#     bash scripts/gpu/gpu_check.sh 1 .gpu-kit/canitedit.jsonl
# then read $OUT/all.tgz (steps.txt, every step's log, the bench's JSON and Markdown).
#
# Installs the wheels, prepares the model, then runs each check of the part asked for under
# its own timeout, in the order of what a session most needs, with its output teed to $OUT
# (default /tmp/out). On CUDA every method runs static passes replayed as CUDA graphs by
# default, all of one shape with key planes (exact by shape: `uniform`, `planes`; kept from
# pass to pass: ADAPLD_KEPT_PLANES), attending the cache's keys up to the next multiple of
# 512 rows (`span`), the model's norms, rotary embedding and products fused (ADAPLD_FUSED);
# `-buckets` methods and `--set uniform=false` run static passes sized to the tree, `-eager`
# methods and `--set graphs=false` dynamic passes.
#   part 1 (~9 minutes on an H200 with coder-1.5b)
#   1. verify-cost.log         the cost of a pass (the default: uniform, planes, span 512; every
#                              n one 80-row pass attending 1,536 keys)
#   2. verify-cost-before.log  the same attending the whole 4,096-row cache with key planes
#                              gathered whole each pass and transformers' small ops (span=0,
#                              ADAPLD_KEPT_PLANES=0, ADAPLD_FUSED=0: the pass much as session
#                              40 left it): what spans, kept planes and fused ops save
#   3. cases.json              the six edit cases, ar,adapld,adapld-chains,adapld-buckets,
#                              hf-pld,hf: the GPU table (docs/performance.md); = ar of
#                              adapld with and without uniform; the chains arm's speed
#                              beside the default's
#   4. identity.json           CanItEdit 21-40, ar,adapld (CANITEDIT.jsonl needed): = ar over
#                              20 tasks, the issue's identity count
#   5. exact.log               2 trees of 65 nodes vs single steps, eager, static, uniform,
#                              uniform with key planes, and those in spans of 16 keys (masked
#                              keys left out change nothing?): rows bitwise equal (chain /
#                              branches) / same argmax (scripts/gpu/gpu_exact.py; last, as a cut
#                              step still leaves the modes it printed)
#   part 2 (~6 minutes; CANITEDIT.jsonl needed for 7 and 8)
#      verify-cost-nocudnn.log  the default's pass with cuDNN attention kept out of captures
#      verify-cost-noplanes.log a uniform pass without key planes: what the planes cost
#      chains.json  the six edit cases, ar,adapld, uniform passes without key planes and
#                   drafts that are single chains (no branches, no semantic alternatives):
#                   the first-child chain's rows were exact without planes (exact.log), so
#                   this is exact too if they stay so, and skips the planes' copies: its = ar
#                   and speed against part 1's
#   6. profile/         torch.profiler over 50 ar steps and 20 adapld passes, graphs
#                       (scripts/gpu/gpu_profile.py --modes graphs)
#   7. canitedit.json   CanItEdit 21-30, ar,hf-pld,adapld: the issue's "5x hf-pld" target
#   8. ablations.json   CanItEdit 31-40, ar,adapld,adapld-no-semantic,adapld-no-branches,
#                       adapld-no-recycle: what the semantic fallback, branches and recycled
#                       successors pay on a GPU
#   part 3 (~5 minutes)
#      verify-cost-buckets.log the cost of a pass over n = 1..64 tokens, bucketed static passes
#      verify-cost-gathered.log the default's pass with its key planes gathered whole each
#                              pass (ADAPLD_KEPT_PLANES=0): kept planes' saving alone
#      verify-cost-unfused.log the default's pass with transformers' RMSNorm and rotary
#                              embedding (ADAPLD_FUSED=0): what the fused small ops save
#   9. eager.json       the six edit cases, ar-eager,adapld-eager,ar-buckets: what the
#                       graphs and the uniform shape gain
#  10. profile/         the profiles of the chains arm (no planes, single chains), of the
#                       nine-size static passes and of eager ones (--modes chains,buckets,eager)
#   part 4 (~5 minutes with coder-0.5b): the GPU table for a second model, whichever the
#   kit holds (`../shared/tools/gpu_kit.sh coder-0.5b`: 8 parts)
#  11. cases.json       the six edit cases, ar,adapld,hf-pld,hf
#  12. canitedit.json   CanItEdit 21-30, ar,hf-pld,adapld
# A step that runs out of time is cut and the next one starts. Every step's exit status is in
# $OUT/steps.txt; PACK=FILE keeps a .tar.gz of $OUT (less the profile's Chrome traces) up to
# date after each step, since a device call returns at most 8 files. BUDGET=SECONDS caps the
# whole part: each step's limit is cut to what is left, and a step with under 20 s left is
# skipped (rc=skip). The machine lacks pyflakes, which the bench's checks import, and the GPU
# kit does not bring it: add its wheel to the kit (`pip download --no-deps -d .gpu-kit/whl
# pyflakes`); the script stops at once (exit 3) when an import it needs fails.
#
# Measured on 2026-12-04 (two sessions with 15 device minutes each): the kit's 23 calls took
# 2 minutes when made one right after another (several `run` calls in one message run in
# turn, ~3.5 s each), the machine's start included. The second session put the kit's calls,
# part 1 (BUDGET=540: 435 s) and part 2 (BUDGET=195) in one message, so the machine never
# sat idle, and had 137 s left for one more short call.
#
# Rehearsal on a CPU, in an environment like the device's (its transformers and packages; see
# the GPU kit), before a session spends device time on it:
#   KIT=DIR DEVICE=cpu QUICK=1 SCALE=4 bash scripts/gpu/gpu_check.sh 1
# KIT: where the wheels and GGUF parts are (default /tmp/kit; without a whl/ folder in it the
# current environment is used as it is), DEVICE: the device (default cuda), QUICK: one task,
# 24 new tokens, small trees and profiles, so each part takes minutes on a CPU; SCALE: a factor
# on every step's time limit (a CPU is slower).
set -uo pipefail
OUT=${OUT:-/tmp/out}
KIT=${KIT:-/tmp/kit}
mkdir -p "$OUT"
part=${1:-1}
tasks=${2:-}
quick=()  # bench options that shorten every run (QUICK)
exact=()  # ... scripts/gpu/gpu_exact.py's
profile=()  # ... scripts/gpu/gpu_profile.py's
if [ -n "${QUICK:-}" ]; then
  quick=(--limit 1 --max-new-tokens 24)
  exact=(--trees 1 --nodes 9)
  profile=(--steps 4 --passes 2 --warmup 1)
fi
step() {  # step NAME SECONDS COMMAND...: run it under a timeout, log, record the status
  local name=$1 limit=$(($2 * ${SCALE:-1}))
  shift 2
  if [ -n "${BUDGET:-}" ]; then
    local left=$((BUDGET - SECONDS))
    if [ "$left" -lt 20 ]; then
      echo "$name rc=skip 0 s" | tee -a "$OUT/steps.txt"
      return
    fi
    [ "$left" -lt "$limit" ] && limit=$left
  fi
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t0)) s" | tee -a "$OUT/steps.txt"
  pack
}
pack() {  # PACK=FILE: everything so far in one compressed tar (a device call returns 8 files)
  [ -z "${PACK:-}" ] || tar czf "$PACK" --exclude='trace_*' -C "$OUT" . 2>/dev/null
}

if [ -d "$KIT/whl" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site "$KIT"/whl/*.whl
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
fi
export HF_HUB_OFFLINE=1 ADAPLD_HOME=${ADAPLD_HOME:-/tmp/ah} CI=1
# what the checks import, lazily imports included (a bench judges each output with pyflakes)
if ! python3 -c "import adapld_cli.bench, pyflakes, gguf, tree_sitter, tree_sitter_python, yaml" \
  2> "$OUT/preflight.log"; then
  echo "preflight: $(tail -n 1 "$OUT/preflight.log"): add its wheel to the kit" | tee -a "$OUT/steps.txt"
  pack
  exit 3
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)" \
  >> "$OUT/gpu.txt" 2>&1
cat "$KIT"/part.* > /tmp/m.gguf
step prepare 120 adapld model prepare --model /tmp/m.gguf
model=(--model /tmp/m.gguf --device "${DEVICE:-cuda}")
cases=(--tasks adapld_cli/bench/edit_cases.jsonl "${quick[@]}")
need_tasks() {  # need_tasks STEP: whether a tasks file was given (else the step is skipped)
  [ -n "$tasks" ] && return 0
  echo "$1 rc=skip: no CANITEDIT.jsonl given" | tee -a "$OUT/steps.txt"
  return 1
}
if [ "$part" = 1 ]; then
  step verify-cost 40 adapld bench "${model[@]}" --verify-cost
  step verify-cost-before 40 env ADAPLD_KEPT_PLANES=0 ADAPLD_FUSED=0 adapld bench \
    "${model[@]}" --verify-cost --set span=0
  step cases 270 adapld bench "${model[@]}" "${cases[@]}" \
    --methods ar,adapld,adapld-chains,adapld-buckets,hf-pld,hf --json "$OUT/cases.json" --markdown "$OUT/cases.md"
  if need_tasks identity; then
    step identity 150 adapld bench "${model[@]}" --tasks "$tasks" --offset 20 --limit 20 \
      "${quick[@]}" --methods ar,adapld --json "$OUT/identity.json" --markdown "$OUT/identity.md"
  fi
  step exact 75 python3 scripts/gpu/gpu_exact.py "${model[@]}" --trees 2 "${exact[@]}"
elif [ "$part" = 2 ]; then
  step verify-cost-nocudnn 40 env ADAPLD_CAPTURE_CUDNN=0 adapld bench "${model[@]}" --verify-cost
  step verify-cost-noplanes 40 adapld bench "${model[@]}" --verify-cost --set planes=false
  step chains 120 adapld bench "${model[@]}" "${cases[@]}" --set planes=false \
    --set semantic=false --set branches=false --methods ar,adapld --json "$OUT/chains.json" \
    --markdown "$OUT/chains.md"
  step profile 60 python3 scripts/gpu/gpu_profile.py "${model[@]}" --modes graphs "${profile[@]}" \
    --out "$OUT/profile"
  if need_tasks canitedit; then
    step canitedit 150 adapld bench "${model[@]}" --tasks "$tasks" --offset 20 --limit 10 \
      "${quick[@]}" --methods ar,hf-pld,adapld --json "$OUT/canitedit.json" \
      --markdown "$OUT/canitedit.md"
    step ablations 150 adapld bench "${model[@]}" --tasks "$tasks" --offset 30 --limit 10 \
      "${quick[@]}" --methods ar,adapld,adapld-no-semantic,adapld-no-branches,adapld-no-recycle \
      --json "$OUT/ablations.json" --markdown "$OUT/ablations.md"
  fi
elif [ "$part" = 3 ]; then
  step verify-cost-buckets 40 adapld bench "${model[@]}" --verify-cost --set uniform=false
  step verify-cost-gathered 40 env ADAPLD_KEPT_PLANES=0 adapld bench "${model[@]}" --verify-cost
  step verify-cost-unfused 40 env ADAPLD_FUSED=0 adapld bench "${model[@]}" --verify-cost
  step eager 150 adapld bench "${model[@]}" "${cases[@]}" \
    --methods ar-eager,adapld-eager,ar-buckets --json "$OUT/eager.json" --markdown "$OUT/eager.md"
  step profile 160 python3 scripts/gpu/gpu_profile.py "${model[@]}" --modes chains,buckets,eager \
    "${profile[@]}" --out "$OUT/profile"
elif [ "$part" = 4 ]; then
  step cases 240 adapld bench "${model[@]}" "${cases[@]}" --methods ar,adapld,hf-pld,hf \
    --json "$OUT/cases.json" --markdown "$OUT/cases.md"
  if need_tasks canitedit; then
    step canitedit 150 adapld bench "${model[@]}" --tasks "$tasks" --offset 20 --limit 10 \
      "${quick[@]}" --methods ar,hf-pld,adapld --json "$OUT/canitedit.json" \
      --markdown "$OUT/canitedit.md"
  fi
else
  echo "no part $part: 1, 2, 3 or 4" | tee -a "$OUT/steps.txt"
fi
pack
exit 0
