#!/usr/bin/env bash
# Install an upstream SGLang release (default: the pin, 0.5.23), CPU-only, into its OWN
# virtual environment, together with kvverify itself (editable), for kvverify's `sglang`
# target (kvverify/targets/sglang/).
#
#   scripts/install-sglang-target.sh [--force] [--version X.Y.Z] [VENV_DIR]
#
# --version X.Y.Z  the release; its lock constraints/sglang-X.Y.Z.txt must exist
#                  (one lock per release, made by scripts/make-sglang-lock.sh).
# VENV_DIR defaults, for the pin, to $KVVERIFY_SGLANG_VENV, else <repo>/.venv-sglang; for
# any other release to <repo>/.venv-sglang-X.Y.Z (gitignored). `kvverify releases --engine
# sglang` looks for /work/venvs/sglang-X.Y.Z style directories.
#
# Why a script: SGLang declares a CUDA torch, flashinfer, sgl-kernel and ~70 more packages.
# Its allocators, radix cache, PrefillAdder and ScheduleBatch are Python + torch, so the lock
# installs the CPU build of torch 2.13.0, sglang --no-deps and the ordinary packages its
# imports need (--no-deps: nothing is re-resolved). triton and torchvision, which SGLang
# imports unconditionally, are replaced by the stubs in stubs/sglang-cpu (put on sys.path by
# a .pth file in the venv; the adapter also adds them itself).
#
# Outcomes (the last line printed says which):
#   READY: <venv>/bin/python          exit 0   installed and verified
#   SKIP: registry unreachable ...     exit $KVVERIFY_SKIP_EXIT_CODE (default 0)
#   anything else                      non-zero exit: a real failure, loudly.
#
# Environment: KVVERIFY_SGLANG_VENV, KVVERIFY_PYTHON, KVVERIFY_TORCH_INDEX_URL,
# KVVERIFY_SKIP_EXIT_CODE, KVVERIFY_PIP_STEP_TIMEOUT (as for install-vllm-target.sh).
# A second run with an unchanged lock and pyproject.toml reuses the venv and needs no network.
set -euo pipefail

readonly PINNED_VERSION="0.5.23"
readonly SCRIPT_REV="1"   # bump to invalidate existing venvs' stamps
readonly TAG="[install-sglang-target]"

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
FORCE=0
VENV_ARG=""
VERSION_ARG=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --force) FORCE=1 ;;
    -h|--help) sed -n '2,30p' "${BASH_SOURCE[0]}"; exit 0 ;;
    --version)
      [[ $# -ge 2 ]] || { echo "$TAG --version needs a value (X.Y.Z)" >&2; exit 2; }
      VERSION_ARG="$2"; shift ;;
    --version=*) VERSION_ARG="${1#--version=}" ;;
    -*) echo "$TAG unknown option: $1" >&2; exit 2 ;;
    *)
      if [[ -n "$VENV_ARG" ]]; then echo "$TAG only one VENV_DIR may be given" >&2; exit 2; fi
      VENV_ARG="$1" ;;
  esac
  shift
done

ENGINE_VERSION="${VERSION_ARG:-$PINNED_VERSION}"
[[ "$ENGINE_VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+(\.post[0-9]+)?$ ]] \
  || { echo "$TAG --version must look like X.Y.Z, got '$ENGINE_VERSION'" >&2; exit 2; }
readonly ENGINE_VERSION
CONSTRAINTS="$REPO_ROOT/constraints/sglang-${ENGINE_VERSION}.txt"
if [[ ! -f "$CONSTRAINTS" ]]; then
  AVAILABLE="$(cd "$REPO_ROOT/constraints" 2>/dev/null && ls sglang-*.txt 2>/dev/null \
    | sed -e 's/^sglang-//' -e 's/\.txt$//' | sort -V | tr '\n' ' ')"
  echo "$TAG ERROR: no lock for SGLang $ENGINE_VERSION (constraints/sglang-${ENGINE_VERSION}.txt does not exist); releases with a lock: ${AVAILABLE:-none}" >&2
  exit 2
fi
if [[ "$ENGINE_VERSION" == "$PINNED_VERSION" ]]; then
  DEFAULT_VENV="${KVVERIFY_SGLANG_VENV:-$REPO_ROOT/.venv-sglang}"
else
  DEFAULT_VENV="$REPO_ROOT/.venv-sglang-$ENGINE_VERSION"
fi
VENV="${VENV_ARG:-$DEFAULT_VENV}"
mkdir -p "$(dirname "$VENV")"
VENV="$(cd "$(dirname "$VENV")" && pwd)/$(basename "$VENV")"
PYTHON="${KVVERIFY_PYTHON:-python3}"
SKIP_EXIT_CODE="${KVVERIFY_SKIP_EXIT_CODE:-0}"
STEP_TIMEOUT="${KVVERIFY_PIP_STEP_TIMEOUT:-1200}"
TORCH_INDEX_URL="${KVVERIFY_TORCH_INDEX_URL:-}"
VPY="$VENV/bin/python"
LOCK_STAMP="$VENV/.kvverify-sglang-lock.stamp"
SELF_STAMP="$VENV/.kvverify-self.stamp"

log() { echo "$TAG $*"; }
die() { echo "$TAG ERROR: $*" >&2; exit 1; }

bounded() {  # bounded SECONDS CMD...: run CMD with a time limit when `timeout` exists
  local limit="$1"; shift
  if command -v timeout >/dev/null 2>&1; then timeout "$limit" "$@"; else "$@"; fi
}

# Environment every SGLang import here runs under: no hub access,
# throwaway cache, no usage reporting.
ENGINE_CACHE_TMP="$(mktemp -d)"
trap 'rm -rf "$ENGINE_CACHE_TMP"' EXIT
engine_env() {
  env HF_HUB_OFFLINE=1 DO_NOT_TRACK=1 SGLANG_DISABLE_REQUEST_LOGGING=1 \
      HOME="$ENGINE_CACHE_TMP" PYTHONWARNINGS=ignore "$@"
}

PIP=("$VPY" -m pip --disable-pip-version-check --no-input)

T0=$SECONDS
declare -a TIMINGS=()
step_done() { TIMINGS+=("$1: $(( SECONDS - $2 ))s"); }

# ---------------------------------------------------------------- preconditions
[[ -f "$CONSTRAINTS" ]] || die "missing lock file $CONSTRAINTS"
[[ -f "$REPO_ROOT/pyproject.toml" ]] || die "missing $REPO_ROOT/pyproject.toml (kvverify is installed editable from it)"
command -v "$PYTHON" >/dev/null 2>&1 || die "interpreter '$PYTHON' not found (set KVVERIFY_PYTHON)"
PY_BOUNDS="$(sed -n -E 's/^# requires-python: *(>=[0-9]+\.[0-9]+,<[0-9]+\.[0-9]+) *$/\1/p' "$CONSTRAINTS" | head -n1)"
PY_BOUNDS="${PY_BOUNDS:->=3.11,<3.15}"
"$PYTHON" - "$PY_BOUNDS" <<'PY' || die "SGLang $ENGINE_VERSION needs Python $PY_BOUNDS; '$PYTHON' is $("$PYTHON" -V 2>&1)"
import re, sys
m = re.fullmatch(r">=(\d+)\.(\d+),<(\d+)\.(\d+)", sys.argv[1])
lo, hi = (int(m[1]), int(m[2])), (int(m[3]), int(m[4]))
sys.exit(not (lo <= sys.version_info[:2] < hi))
PY

TORCH_PIN="$(grep -E '^torch==' "$CONSTRAINTS" | head -n1)"
[[ -n "$TORCH_PIN" ]] || die "no torch== pin in $CONSTRAINTS"

# The lock stamp names everything the heavy part depends on.
LOCK_KEY="$("$PYTHON" - "$CONSTRAINTS" "$SCRIPT_REV" "$TORCH_INDEX_URL" <<'PY'
import hashlib, sys
h = hashlib.sha256(open(sys.argv[1], "rb").read())
h.update(("|".join(sys.argv[2:]) + "|" + sys.version).encode())
print(h.hexdigest())
PY
)"
SELF_KEY="$("$PYTHON" - "$REPO_ROOT" <<'PY'
import hashlib, os, sys
root = sys.argv[1]
h = hashlib.sha256(open(os.path.join(root, "pyproject.toml"), "rb").read())
h.update(root.encode())
print(h.hexdigest())
PY
)"

stamp_ok() { [[ -f "$1" ]] && [[ "$(cat "$1")" == "$2" ]]; }

LOCK_READY=0
SELF_READY=0
if [[ $FORCE -eq 0 && -x "$VPY" ]] && stamp_ok "$LOCK_STAMP" "$LOCK_KEY"; then
  LOCK_READY=1
  stamp_ok "$SELF_STAMP" "$SELF_KEY" && SELF_READY=1
fi

# ------------------------------------------------------------------- venv
CREATED_VENV=0
if [[ $LOCK_READY -eq 0 ]]; then
  if [[ -e "$VENV" ]]; then
    [[ -f "$VENV/pyvenv.cfg" ]] || die "$VENV exists and is not a virtual environment; refusing to replace it"
    log "removing stale venv $VENV"
    rm -rf "$VENV"
  fi
  t=$SECONDS
  log "creating venv $VENV with $("$PYTHON" -V 2>&1)"
  "$PYTHON" -m venv "$VENV" || die "could not create the venv (is the python venv module installed?)"
  CREATED_VENV=1
  step_done "venv" "$t"
fi

# -------------------------------------------------------------- registry probe
# Needed only when something must be installed. `pip index versions sglang` asks
# the configured index (and extra indexes) for SGLang's release list: it fails when
# the index cannot be reached, and it is a single small request.
if [[ $LOCK_READY -eq 0 || $SELF_READY -eq 0 ]]; then
  t=$SECONDS
  set +e
  PROBE_OUT="$(bounded 120 "${PIP[@]}" index versions sglang --timeout 15 --retries 1 2>&1)"
  PROBE_RC=$?
  set -e
  step_done "registry probe" "$t"
  if [[ $PROBE_RC -ne 0 ]]; then
    [[ $CREATED_VENV -eq 1 ]] && rm -rf "$VENV"
    echo "$PROBE_OUT" | tail -n 3 | sed "s/^/$TAG   pip: /"
    echo "SKIP: registry unreachable (pip could not list sglang from the package index; exit $PROBE_RC); the sglang target was NOT installed or updated; nothing was changed"
    exit "$SKIP_EXIT_CODE"
  fi
  if ! grep -Eq "(^|[ ,:])${ENGINE_VERSION//./\\.}(,|$)" <<<"$PROBE_OUT"; then
    echo "$PROBE_OUT" | sed "s/^/$TAG   pip: /" | head -n 5
    die "the package index is reachable but does not offer sglang==$ENGINE_VERSION"
  fi
  log "package index reachable; sglang $ENGINE_VERSION is offered"
fi

# ------------------------------------------------------------- the pinned lock
if [[ $LOCK_READY -eq 0 ]]; then
  t=$SECONDS
  TORCH_ARGS=()
  [[ -n "$TORCH_INDEX_URL" ]] && TORCH_ARGS=(--extra-index-url "$TORCH_INDEX_URL")
  log "step 1/3: $TORCH_PIN (CPU build, --no-deps; its dependencies are in the lock)"
  bounded "$STEP_TIMEOUT" "${PIP[@]}" install --progress-bar off -q --no-deps \
      ${TORCH_ARGS[@]+"${TORCH_ARGS[@]}"} "$TORCH_PIN" \
    || die "could not install $TORCH_PIN. If your index has no CPU build, set KVVERIFY_TORCH_INDEX_URL to a PyTorch CPU wheel index. Never install an unpinned torch: the default Linux wheel pulls CUDA."
  step_done "torch" "$t"

  t=$SECONDS
  log "step 2/3: the lock ($(grep -cE '^[A-Za-z0-9_.-]+==' "$CONSTRAINTS") pins, incl. sglang==$ENGINE_VERSION), --no-deps"
  bounded "$STEP_TIMEOUT" "${PIP[@]}" install --progress-bar off -q --no-deps -r "$CONSTRAINTS" \
    || die "could not install the pinned lock $CONSTRAINTS"
  step_done "lock (sglang + deps)" "$t"
fi

# ------------------------------------------------ the triton / torchvision stubs
SITE="$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$REPO_ROOT/stubs/sglang-cpu" > "$SITE/kvverify-sglang-cpu-stubs.pth"

# -------------------------------------------------------------- verification
t=$SECONDS
log "verifying the SGLang install (versions, KV-cache imports through the stubs, no CUDA)"
(cd / && engine_env "$VPY" - "$CONSTRAINTS" "$ENGINE_VERSION" <<'PY'
import importlib, importlib.metadata as md, re, sys
from packaging.utils import canonicalize_name as canon

lock_path, want = sys.argv[1], sys.argv[2]
problems = []
pins = {}
for line in open(lock_path):
    line = line.split("#", 1)[0].strip()
    if line:
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==(\S+)", line)
        if not m:
            problems.append(f"lock line is not an exact pin: {line!r}")
            continue
        pins[canon(m.group(1))] = m.group(2)
installed = {canon(d.metadata["Name"]): d.version for d in md.distributions()}
for name, ver in sorted(pins.items()):
    if installed.get(name) != ver:
        problems.append(f"{name}: lock pins {ver}, installed {installed.get(name)}")
for name in installed:
    if name.startswith(("nvidia-", "cuda-")) or name in ("triton", "flashinfer-python", "sgl-kernel", "sglang-kernel"):
        problems.append(f"unexpected GPU package installed: {name}")
import torch
if torch.version.cuda is not None:
    problems.append(f"torch is a CUDA build ({torch.__version__})")
import triton
if "kvverify.stub" not in getattr(triton, "__version__", ""):
    problems.append(f"triton is not kvverify's stub: {triton.__file__}")
if md.version("sglang") != want:
    problems.append(f"sglang is {md.version('sglang')}, want {want}")
for mod in ("sglang.srt.managers.schedule_batch", "sglang.srt.managers.schedule_policy",
            "sglang.srt.managers.utils", "sglang.srt.mem_cache.radix_cache",
            "sglang.srt.mem_cache.memory_pool"):
    try:
        importlib.import_module(mod)
    except Exception as e:  # noqa: BLE001 - report every failure
        problems.append(f"import {mod} failed: {type(e).__name__}: {e}")
if problems:
    print("VERIFY FAILED:", *problems, sep="\n  ", file=sys.stderr)
    sys.exit(1)
print(f"verified: torch {torch.__version__}, sglang {want}, {len(pins)} pins exact, KV modules import on CPU")
PY
) || die "verification of the SGLang install failed (see above)"
echo "$LOCK_KEY" > "$LOCK_STAMP"
step_done "verify" "$t"

# ------------------------------------------------------- kvverify (editable)
if [[ $SELF_READY -eq 0 ]]; then
  t=$SECONDS
  log "step 3/3: kvverify (editable, from $REPO_ROOT), its own deps constrained by the lock"
  rm -f "$SELF_STAMP"
  bounded "$STEP_TIMEOUT" "${PIP[@]}" install --progress-bar off -q -c "$CONSTRAINTS" -e "$REPO_ROOT" \
    || die "could not install kvverify (pip install -e $REPO_ROOT)"
  step_done "kvverify -e" "$t"
fi
(cd / && engine_env "$VPY" - "$REPO_ROOT" <<'PY'
import os, sys
import kvverify
root = os.path.realpath(sys.argv[1])
where = os.path.realpath(os.path.dirname(kvverify.__file__))
if not where.startswith(root + os.sep):
    sys.exit(f"kvverify imports from {where}, not from {root}")
PY
) || die "kvverify is not importable from $REPO_ROOT in the venv"
echo "$SELF_KEY" > "$SELF_STAMP"

# ------------------------------------------------------------------ report
if [[ $LOCK_READY -eq 0 ]]; then  # a fresh install: record its cost (`kvverify releases` shows it)
  printf '{"sglang": "%s", "install_seconds": %d, "python": "%s", "date": "%s"}\n' \
    "$ENGINE_VERSION" "$(( SECONDS - T0 ))" "$("$VPY" -c 'import platform; print(platform.python_version())')" \
    "$(date -u +%Y-%m-%dT%H:%MZ)" > "$VENV/.kvverify-install.json"
fi
log "timings: ${TIMINGS[*]:-nothing to do}; total $(( SECONDS - T0 ))s"
log "venv size: $(du -sh "$VENV" 2>/dev/null | cut -f1)  ($VENV)"
log "run with: $VPY -m pytest properties/ --target sglang"
echo "READY: $VPY"
