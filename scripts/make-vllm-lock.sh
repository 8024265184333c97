#!/usr/bin/env bash
# Make the CPU-only lock constraints/vllm-X.Y.Z.txt for one vLLM release (maintainers only;
# scripts/install-vllm-target.sh installs from the lock, with no resolution).
#
#   scripts/make-vllm-lock.sh X.Y.Z [VENV_DIR]
#
# The lock is what an UNLOCKED install of the release resolved (install-vllm-target.sh without
# a lock: torch's CPU build, vllm --no-deps, the release's own Requires-Dist minus the GPU stack,
# xgrammar / apache-tvm-ffi at versions pip picks together, installed --no-deps), verified by
# the adapter's own import check, then frozen. With VENV_DIR the unlocked install goes there and
# stays (install-vllm-target.sh --version X.Y.Z VENV_DIR then reuses it as the locked venv:
# every pin already holds); without, a scratch venv is made and removed.
set -euo pipefail
VERSION="${1:?usage: make-vllm-lock.sh X.Y.Z [VENV_DIR]}"
[[ "$VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+(\.post[0-9]+)?$ ]] || { echo "bad version $VERSION" >&2; exit 2; }
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOCK="$REPO_ROOT/constraints/vllm-$VERSION.txt"
[[ ! -f "$LOCK" ]] || { echo "$LOCK exists already (delete it to remake it)" >&2; exit 2; }
VENV="${2:-}"
SCRATCH=""
if [[ -z "$VENV" ]]; then
  SCRATCH="$(mktemp -d)"
  VENV="$SCRATCH/venv"
  trap 'rm -rf "$SCRATCH"' EXIT
fi
FREEZE="$VENV/.kvverify-unlocked-freeze.txt"
if [[ ! -f "$FREEZE" ]]; then
  # the install's last step asks the adapter; a release it does not know yet fails there (drift to
  # teach compat.py / history.py), after the install itself was verified: the lock is still made
  bash "$REPO_ROOT/scripts/install-vllm-target.sh" --version "$VERSION" "$VENV" 2>&1 | tail -n 4 \
    || echo "(the install's adapter check failed: see above; the lock records the verified install)"
fi
[[ -f "$FREEZE" && -f "$VENV/.kvverify-vllm-lock.stamp" ]] \
  || { echo "no verified unlocked install of vLLM $VERSION in $VENV" >&2; exit 1; }
PY_BOUNDS="$("$VENV/bin/python" - <<'PY'
import importlib.metadata as md, re
spec = md.metadata("vllm").get("Requires-Python") or ""
lo = re.search(r">=\s*(\d+\.\d+)", spec)
hi = re.search(r"<\s*(\d+\.\d+)", spec)
print(f">={lo.group(1) if lo else '3.10'},<{hi.group(1) if hi else '3.15'}")
PY
)"
NODEPS="$(cat "$VENV/.kvverify-unlocked/nodeps-pins.txt" 2>/dev/null | tr '\n' ' ')"
LEFT="$(cut -d: -f1 "$VENV/.kvverify-unlocked/left-out.txt" | sed -E 's/[<>=!~\[].*//' | sort -u | tr '\n' ' ')"
PYVER="$("$VENV/bin/python" -c 'import platform; print(platform.python_version())')"
{
  echo "# Pinned, CPU-only install of upstream vLLM $VERSION for kvverify's \`vllm\` target."
  echo "# requires-python: $PY_BOUNDS"
  echo "#"
  echo "# A LOCK like constraints/vllm-0.33.0.txt (read its header): every distribution the"
  echo "# minimal install needs, exact versions, Python $PYVER, Linux x86_64; installed with"
  echo "# \`scripts/install-vllm-target.sh --version $VERSION\` (pip install --no-deps -r)."
  echo "#"
  echo "# Made by scripts/make-vllm-lock.sh $VERSION ($(date -u +%Y-%m-%d)): the release's own Requires-Dist,"
  echo "# resolved by pip next to torch 2.13.0+cpu and kvverify's Hypothesis, verified (the adapter's"
  echo "# KV-cache imports), frozen. Deliberate departures from vLLM $VERSION's declared requirements:"
  echo "#   * torch 2.13.0+cpu instead of vLLM's torch pin (the CPU build; same reasoning as the pin)."
  echo "#   * vllm, ${NODEPS:-xgrammar / apache-tvm-ffi} without their dependencies (versions pip picked"
  echo "#     together: their own requirements on each other hold)."
  echo "#   * the GPU stack left out: ${LEFT:-none}"
  echo ""
  echo "# --- torch: installed first, in its own step (see KVVERIFY_TORCH_INDEX_URL) ---"
  echo "torch==2.13.0+cpu"
  echo ""
  echo "# --- the target itself and the packages it needs without their deps ---"
  echo "vllm==$VERSION"
  for p in $NODEPS; do echo "$p"; done
  echo ""
  echo "# --- everything else, as resolved (sorted) ---"
  grep -vE '^(torch==|vllm==|hypothesis==|sortedcontainers==|pip==|kvverify)' "$FREEZE" \
    | grep -viE "^($(echo "$NODEPS" | sed -E 's/==[^ ]+//g; s/ +$//; s/ /|/g'))==" || true
  echo ""
  echo "# --- kvverify's Hypothesis, one version everywhere (pyproject.toml pins the same): the example"
  echo "#     database's format and key derivation are its internals (docs/nightly.md) ---"
  grep -E '^(hypothesis|sortedcontainers)==' "$FREEZE"
} > "$LOCK.tmp"
mv "$LOCK.tmp" "$LOCK"
echo "LOCK: $LOCK ($(grep -cE '^[A-Za-z0-9_.-]+==' "$LOCK") pins)"
