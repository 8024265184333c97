#!/usr/bin/env bash
# Install an upstream vLLM release (default: the pin, kvverify/targets/vllm/support.py), CPU-only, into its
# OWN virtual environment, together with kvverify itself (editable), for
# kvverify's `vllm` target.
#
#   scripts/install-vllm-target.sh [--force] [--version X.Y.Z] [VENV_DIR]
#
# --version X.Y.Z  the release; its lock constraints/vllm-X.Y.Z.txt must exist
#                  (one lock per release; `ls constraints/` lists them).
# VENV_DIR defaults, for the pin, to $KVVERIFY_VLLM_VENV, else <repo>/.venv-vllm;
# for any other release to <repo>/.venv-vllm-X.Y.Z (both gitignored).
# kvverify's release matrix (`kvverify releases`) looks for /work/venvs/vllm-X.Y.Z
# style directories: pass such a VENV_DIR to make a release part of it.
#
# Why a script and not `pip install 'kvverify[vllm]'`: vLLM's declared
# requirements pull ~9 GB of CUDA packages and an exact torch==2.14.0. Its
# KV-cache planner, block pool, managers and scheduler are pure Python, so we
# install vLLM --no-deps on the CPU build of torch 2.13.0 plus the ~two dozen
# ordinary packages its imports need, all pinned in constraints/vllm-X.Y.Z.txt
# (a lock, installed with --no-deps: nothing is re-resolved). A lock may carry a
# `# requires-python: >=A.B,<C.D` line (the release's Python bounds; default
# >=3.11,<3.15).
#
# Outcomes (the last line printed says which):
#   READY: <venv>/bin/python          exit 0   the venv is installed and verified
#   SKIP: registry unreachable ...     exit $KVVERIFY_SKIP_EXIT_CODE (default 0)
#                                      pip could not reach the package index;
#                                      nothing was installed, callers should skip
#                                      the vllm target (and say so).
#   anything else                      non-zero exit: a real failure, loudly.
#
# Environment:
#   KVVERIFY_VLLM_VENV        venv directory (overridden by the VENV_DIR argument)
#   KVVERIFY_PYTHON           interpreter to build the venv from (default python3;
#                             vLLM 0.33.0 needs Python >=3.11,<3.15)
#   KVVERIFY_VLLM_VENV        (see above; used for the pin only)
#   KVVERIFY_TORCH_INDEX_URL  extra index for the torch step only, for indexes that
#                             lack the local-version CPU build torch==2.13.0+cpu
#                             (e.g. PyTorch's own CPU wheel index)
#   KVVERIFY_SKIP_EXIT_CODE   exit status of the SKIP outcome (default 0)
#   KVVERIFY_PIP_STEP_TIMEOUT seconds allowed per pip step (default 1200)
#
# A second run with an unchanged lock and pyproject.toml reuses the venv and
# needs no network. --force rebuilds it from scratch.
set -euo pipefail

PINNED_VERSION="$("${KVVERIFY_PYTHON:-python3}" "$(dirname "${BASH_SOURCE[0]}")/../kvverify/targets/vllm/support.py" pin)" \
  || { echo "[install-vllm-target] cannot read the pin from kvverify/targets/vllm/support.py" >&2; exit 2; }
readonly PINNED_VERSION   # the release the reference mirrors, written once in support.py
readonly SCRIPT_REV="1"   # bump to invalidate existing venvs' stamps
readonly TAG="[install-vllm-target]"

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
FORCE=0
VENV_ARG=""
VERSION_ARG=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --force) FORCE=1 ;;
    -h|--help) sed -n '2,48p' "${BASH_SOURCE[0]}"; exit 0 ;;
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

VLLM_VERSION="${VERSION_ARG:-$PINNED_VERSION}"
[[ "$VLLM_VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+(\.post[0-9]+)?$ ]] \
  || { echo "$TAG --version must look like X.Y.Z, got '$VLLM_VERSION'" >&2; exit 2; }
readonly VLLM_VERSION
CONSTRAINTS="$REPO_ROOT/constraints/vllm-${VLLM_VERSION}.txt"
if [[ ! -f "$CONSTRAINTS" ]]; then
  AVAILABLE="$(cd "$REPO_ROOT/constraints" 2>/dev/null && ls vllm-*.txt 2>/dev/null \
    | sed -e 's/^vllm-//' -e 's/\.txt$//' | sort -V | tr '\n' ' ')"
  echo "$TAG ERROR: no lock for vLLM $VLLM_VERSION (constraints/vllm-${VLLM_VERSION}.txt does not exist); releases with a lock: ${AVAILABLE:-none}" >&2
  exit 2
fi
if [[ "$VLLM_VERSION" == "$PINNED_VERSION" ]]; then
  DEFAULT_VENV="${KVVERIFY_VLLM_VENV:-$REPO_ROOT/.venv-vllm}"
else
  DEFAULT_VENV="$REPO_ROOT/.venv-vllm-$VLLM_VERSION"
fi
VENV="${VENV_ARG:-$DEFAULT_VENV}"
mkdir -p "$(dirname "$VENV")"
VENV="$(cd "$(dirname "$VENV")" && pwd)/$(basename "$VENV")"
PYTHON="${KVVERIFY_PYTHON:-python3}"
SKIP_EXIT_CODE="${KVVERIFY_SKIP_EXIT_CODE:-0}"
STEP_TIMEOUT="${KVVERIFY_PIP_STEP_TIMEOUT:-1200}"
TORCH_INDEX_URL="${KVVERIFY_TORCH_INDEX_URL:-}"
VPY="$VENV/bin/python"
LOCK_STAMP="$VENV/.kvverify-vllm-lock.stamp"
SELF_STAMP="$VENV/.kvverify-self.stamp"

log() { echo "$TAG $*"; }
die() { echo "$TAG ERROR: $*" >&2; exit 1; }

bounded() {  # bounded SECONDS CMD...: run CMD with a time limit when `timeout` exists
  local limit="$1"; shift
  if command -v timeout >/dev/null 2>&1; then timeout "$limit" "$@"; else "$@"; fi
}

# Environment every vLLM import here runs under: CPU platform, no hub access,
# throwaway cache, no usage reporting.
VLLM_CACHE_TMP="$(mktemp -d)"
trap 'rm -rf "$VLLM_CACHE_TMP"' EXIT
vllm_env() {
  env VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
      VLLM_CACHE_ROOT="$VLLM_CACHE_TMP" "$@"
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
"$PYTHON" - "$PY_BOUNDS" <<'PY' || die "vLLM $VLLM_VERSION needs Python $PY_BOUNDS; '$PYTHON' is $("$PYTHON" -V 2>&1)"
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
# Needed only when something must be installed. `pip index versions vllm` asks
# the configured index (and extra indexes) for vLLM's release list: it fails when
# the index cannot be reached, and it is a single small request.
if [[ $LOCK_READY -eq 0 || $SELF_READY -eq 0 ]]; then
  t=$SECONDS
  set +e
  PROBE_OUT="$(bounded 120 "${PIP[@]}" index versions vllm --timeout 15 --retries 1 2>&1)"
  PROBE_RC=$?
  set -e
  step_done "registry probe" "$t"
  if [[ $PROBE_RC -ne 0 ]]; then
    [[ $CREATED_VENV -eq 1 ]] && rm -rf "$VENV"
    echo "$PROBE_OUT" | tail -n 3 | sed "s/^/$TAG   pip: /"
    echo "SKIP: registry unreachable (pip could not list vllm from the package index; exit $PROBE_RC); the vllm target was NOT installed or updated; nothing was changed"
    exit "$SKIP_EXIT_CODE"
  fi
  if ! grep -Eq "(^|[ ,:])${VLLM_VERSION//./\\.}(,|$)" <<<"$PROBE_OUT"; then
    echo "$PROBE_OUT" | sed "s/^/$TAG   pip: /" | head -n 5
    die "the package index is reachable but does not offer vllm==$VLLM_VERSION"
  fi
  log "package index reachable; vllm $VLLM_VERSION is offered"
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
  log "step 2/3: the lock ($(grep -cE '^[A-Za-z0-9_.-]+==' "$CONSTRAINTS") pins, incl. vllm==$VLLM_VERSION, xgrammar, apache-tvm-ffi), --no-deps"
  bounded "$STEP_TIMEOUT" "${PIP[@]}" install --progress-bar off -q --no-deps -r "$CONSTRAINTS" \
    || die "could not install the pinned lock $CONSTRAINTS"
  step_done "lock (vllm + deps)" "$t"
fi

# -------------------------------------------------------------- verification
t=$SECONDS
log "verifying the vLLM install (versions, KV-cache imports, no CUDA, vLLM's own specifiers)"
# the modules are the adapter's own list (MODULES in kvverify/targets/vllm/compat.py), read
# from its source: kvverify is not installed yet (see scripts/verify_vllm_install.py)
(cd / && vllm_env "$VPY" "$SCRIPT_DIR/verify_vllm_install.py" "$CONSTRAINTS" "$VLLM_VERSION" \
    "$REPO_ROOT/kvverify/targets/vllm/compat.py"
) || die "verification of the vLLM install failed (see above)"
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
(cd / && vllm_env "$VPY" - "$REPO_ROOT" <<'PY'
import os, sys
import kvverify
root = os.path.realpath(sys.argv[1])
where = os.path.realpath(os.path.dirname(kvverify.__file__))
if not where.startswith(root + os.sep):
    sys.exit(f"kvverify imports from {where}, not from {root}")
# the adapter itself: the release in its supported range, its modules found where it looks
from kvverify.targets.vllm.env import vllm_available
ok, why = vllm_available()
if not ok:
    sys.exit(f"the vllm target cannot use this install: {why}")
print(f"verified: the vllm target imports vLLM {why} (kvverify from {where})")
PY
) || die "kvverify is not importable from $REPO_ROOT in the venv, or its vllm target cannot use the install"
echo "$SELF_KEY" > "$SELF_STAMP"

# ------------------------------------------------------------------ report
if [[ $LOCK_READY -eq 0 ]]; then  # a fresh install: record its cost (`kvverify releases` shows it)
  printf '{"vllm": "%s", "install_seconds": %d, "python": "%s", "date": "%s"}\n' \
    "$VLLM_VERSION" "$(( SECONDS - T0 ))" "$("$VPY" -c 'import platform; print(platform.python_version())')" \
    "$(date -u +%Y-%m-%dT%H:%MZ)" > "$VENV/.kvverify-install.json"
fi
log "timings: ${TIMINGS[*]:-nothing to do}; total $(( SECONDS - T0 ))s"
log "venv size: $(du -sh "$VENV" 2>/dev/null | cut -f1)  ($VENV)"
log "run with: VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 $VPY ..."
echo "READY: $VPY"
