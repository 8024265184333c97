#!/usr/bin/env bash
# One short, prepared GPU check of the allocation harness (issue 9). Run from anywhere on a
# machine with an NVIDIA GPU:   bash scripts/gpu_harness_check.sh
#
# 1. installs nothing if torch is already importable; otherwise only `pip install -e .[torch]`;
# 2. pytest properties/test_harness.py -m cuda  (real-dimension catalog models, 4 GiB each:
#    data checks + memory_allocated + mem_get_info at 0.9; a small hybrid plan and a mutation);
# 3. kvverify harness --device cuda on a catalog model, 8 GiB, every check;
# 4. the same at the full mem_get_info budget (gpu_memory_utilization 0.9), memory checks only.
# 5. the whole harness suite (cpu, meta and cuda tests) under this machine's torch, -n 8.
# GPU_CHECK_OUT=DIR keeps the evidence there: JSON reports of steps 3-4, junit XML of 2 and 5.
# Exit status: 0 when every step passed; otherwise the number of failed steps.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
MODEL=${KVVERIFY_GPU_MODEL:-llama-3.1-8b}
FULL_MODEL=${KVVERIFY_GPU_FULL_MODEL:-gemma-3-27b}
failed=0
OUTDIR=${GPU_CHECK_OUT:-}
[ -n "$OUTDIR" ] && mkdir -p "$OUTDIR"
junit() { [ -n "$OUTDIR" ] && echo "--junitxml=$OUTDIR/$1.xml"; }

echo "== environment =="
if ! "$PY" -c "import torch" 2>/dev/null; then
  echo "torch missing: pip install -e .[torch]"
  "$PY" -m pip install -q -e '.[torch]' || { echo "FAILED: pip install -e .[torch]"; exit 1; }
fi
"$PY" - <<'PYEOF'
import torch
print(f"torch {torch.__version__}, cuda available: {torch.cuda.is_available()}")
if torch.cuda.is_available():
    free, total = torch.cuda.mem_get_info()
    print(f"device: {torch.cuda.get_device_name()}  free {free/2**30:.1f} GiB / total {total/2**30:.1f} GiB")
else:
    print("WARNING: torch sees no CUDA GPU: the cuda tests below will be skipped and the CLI steps fail")
PYEOF

if command -v kvverify >/dev/null 2>&1 && kvverify harness --help 2>/dev/null | grep -q -- "--device"; then
  HARNESS=(kvverify harness)
else  # the subcommand is not wired into kvverify/cli.py (yet): the same code, run directly
  HARNESS=("$PY" -m kvverify.cli.harness harness)
fi
echo "harness command: ${HARNESS[*]}"

step() {  # step NAME TIMEOUT CMD...
  local name=$1 limit=$2; shift 2
  echo; echo "== $name =="; echo "+ $*"
  local t0=$SECONDS
  timeout "$limit" "$@"; local rc=$?
  echo "-- $name: rc=$rc in $((SECONDS - t0)) s"
  [ "$rc" -eq 0 ] || failed=$((failed + 1))
}

harness_step() {  # harness_step NAME FILE ARGS...: a harness run, its JSON report kept in OUTDIR
  local name=$1 file=$2; shift 2
  if [ -n "$OUTDIR" ]; then
    step "$name" 180 bash -c '"$@" --json > "'"$OUTDIR/$file"'"; rc=$?; cat "'"$OUTDIR/$file"'"; exit $rc' _ "$@"
  else
    step "$name" 180 "$@"
  fi
}

step "pytest -m cuda" 300 "$PY" -m pytest properties/test_harness.py -m cuda -q -rs -p no:randomly $(junit cuda)
harness_step "harness $MODEL, 8 GiB, all checks" "harness-$MODEL.json" "${HARNESS[@]}" --model "$MODEL" \
  --device cuda --kv-cache-memory-bytes $((8 * 1024 * 1024 * 1024)) --max-model-len 32768
harness_step "harness $FULL_MODEL, full budget at 0.9, memory checks" "harness-$FULL_MODEL-full.json" \
  "${HARNESS[@]}" --model "$FULL_MODEL" --device cuda --gpu-memory-utilization 0.9 --max-model-len 32768 \
  --no-data-checks
step "harness suite, every device, -n 8" 300 "$PY" -m pytest properties/test_harness.py \
  tests/test_harness_mutations.py -q -rs -p no:randomly -n 8 --hypothesis-profile=ci $(junit suite)

echo; echo "== gpu_harness_check: $failed step(s) failed =="
exit "$failed"
