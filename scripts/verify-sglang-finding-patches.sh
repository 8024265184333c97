#!/usr/bin/env bash
# Fail-before / pass-after for the SGLang findings' patches (reports/findings/patches/sglang/):
# each upstream-style regression test test_SG<n>_*.py must FAIL on the installed, unpatched
# SGLang and PASS with the finding's patch applied to an overlay of the installed package
# (kvverify/targets/sglang/overlay.py), never to the venv.
#
#   scripts/verify-sglang-finding-patches.sh [PYTHON]     (default /work/venvs/sglang-0.5.23/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${1:-${KVVERIFY_SGLANG_VENV:+$KVVERIFY_SGLANG_VENV/bin/python}}"
PY="${PY:-/work/venvs/sglang-0.5.23/bin/python}"
export HF_HUB_OFFLINE=1 PYTHONWARNINGS=ignore
# this checkout's triton / torchvision stubs, unless the interpreter imports a triton (a real one
# on a GPU machine, or the venv's stubs .pth): the tests import SGLang without kvverify's adapter
STUBS=""
"$PY" -c "import triton" >/dev/null 2>&1 || STUBS="$PWD/stubs/sglang-cpu"
DIR=reports/findings/patches/sglang
rc=0
for test in "$DIR"/test_SG*_*.py; do
  n="$(basename "$test" .py | cut -d_ -f2)"
  fix="$("$PY" -c "from kvverify.sglang.fixes import CATALOG; print(*[f.name for f in CATALOG.values() if f.finding == '$n'])")"
  [ -n "$fix" ] || { echo "no fix option for finding $n"; rc=1; continue; }
  overlay="$("$PY" -m kvverify.targets.sglang.overlay $fix)"
  if PYTHONPATH="$STUBS" "$PY" -m pytest -q -p no:cacheprovider --noconftest -o addopts= --rootdir="$DIR" "$test" >/tmp/.sg-before.$$ 2>&1; then
    echo "FAIL: $n: $(basename "$test") passes on the UNPATCHED SGLang (it must fail)"; rc=1
  elif tail -n 1 /tmp/.sg-before.$$ | grep -q " failed" && ! tail -n 1 /tmp/.sg-before.$$ | grep -q "error"; then
    echo "ok: $n fails unpatched ($(tail -n 1 /tmp/.sg-before.$$))"
  else  # an import or collection error is no evidence the finding is there
    echo "FAIL: $n: $(basename "$test") errors on the UNPATCHED SGLang instead of failing:"
    tail -n 20 /tmp/.sg-before.$$; rc=1
  fi
  if PYTHONPATH="$overlay${STUBS:+:$STUBS}" "$PY" -m pytest -q -p no:cacheprovider --noconftest -o addopts= --rootdir="$DIR" "$test" >/tmp/.sg-after.$$ 2>&1; then
    echo "ok: $n passes patched ($(tail -n 1 /tmp/.sg-after.$$))"
  else
    echo "FAIL: $n fails with its patch ($fix):"; tail -n 20 /tmp/.sg-after.$$; rc=1
  fi
done
rm -f /tmp/.sg-before.$$ /tmp/.sg-after.$$
exit $rc
