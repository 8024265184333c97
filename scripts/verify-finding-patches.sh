#!/usr/bin/env bash
# Fail-before / pass-after for every finding's patch (reports/findings/patches/):
# each upstream-style regression test test_F<n>_*.py must FAIL on the pinned, unpatched
# vLLM and PASS once the patch is applied. Patches are applied to an overlay of the
# installed package (kvverify/targets/overlay.py), never to the venv itself.
#
#   scripts/verify-finding-patches.sh [--each] [PYTHON]
#
# PYTHON: the vLLM venv's interpreter (default $KVVERIFY_VLLM_VENV/bin/python, else
# /work/venvs/vllm-0.33.0/bin/python). Default: two pytest runs, unpatched (every test
# file must fail) and all patches together (every test must pass). --each: also every
# test file with only its own patch (7 more runs, ~30 s each on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
EACH=0
if [ "${1:-}" = "--each" ]; then EACH=1; shift; fi
PY="${1:-${KVVERIFY_VLLM_VENV:+$KVVERIFY_VLLM_VENV/bin/python}}"
PY="${PY:-/work/venvs/vllm-0.33.0/bin/python}"
export VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

# fix option <TAB> test file, one line per finding with a patch
"$PY" - >"$TMP/pairs" <<'PYEOF'
from pathlib import Path
from kvverify.targets.overlay import PATCHES, patches_dir
for fix, diff in PATCHES.items():
    n, slug = diff.removesuffix(".diff").split("-", 1)
    test = patches_dir() / f"test_{n}_{slug.replace('-', '_')}.py"
    if not test.is_file():
        raise SystemExit(f"missing regression test {test}")
    print(f"{fix}\t{test}")
PYEOF

# run_tests LABEL EXPECT(fail|pass) PYTHONPATH-or-empty FILE...
run_tests() {
  local label="$1" expect="$2" overlay="$3"; shift 3
  local xml="$TMP/$label.xml"
  PYTHONPATH="${overlay}" "$PY" -m pytest -q -p no:cacheprovider --noconftest -o addopts= \
    --rootdir=reports/findings/patches --junitxml="$xml" "$@" >"$TMP/$label.log" 2>&1 || true
  "$PY" - "$xml" "$expect" "$label" "$@" <<'PYEOF' || { tail -40 "$TMP/$label.log"; return 1; }
import sys, xml.etree.ElementTree as ET
from collections import defaultdict
path, expect, label, files = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
failed, total = defaultdict(int), defaultdict(int)
for case in ET.parse(path).iter("testcase"):
    name = case.get("classname", "").rsplit(".", 1)[-1] if "." in case.get("classname", "") else case.get("classname", "")
    key = next((f for f in files if f.rsplit("/", 1)[-1].removesuffix(".py") in case.get("classname", "")), "?")
    total[key] += 1
    if case.find("failure") is not None or case.find("error") is not None:
        failed[key] += 1
bad = []
for f in files:
    short = f.rsplit("/", 1)[-1]
    if total[f] == 0:
        bad.append(f"{short}: no test ran")
    elif expect == "fail" and failed[f] == 0:
        bad.append(f"{short}: passes on unpatched vLLM (it must fail there)")
    elif expect == "pass" and failed[f]:
        bad.append(f"{short}: {failed[f]} of {total[f]} fail with the patch")
    else:
        print(f"  ok  [{label}] {short}: {failed[f]}/{total[f]} failing (expected: {expect})")
for b in bad:
    print(f"  BAD [{label}] {b}")
sys.exit(1 if bad else 0)
PYEOF
}

mapfile -t FILES < <(cut -f2 "$TMP/pairs")
mapfile -t FIXES < <(cut -f1 "$TMP/pairs")
rc=0
echo "== finding patches: unpatched vLLM ($("$PY" -c 'import importlib.metadata as m; print(m.version("vllm"))'))"
run_tests unpatched fail "" "${FILES[@]}" || rc=1
ALL="$("$PY" -m kvverify.targets.overlay "${FIXES[@]}")"
echo "== finding patches: all applied ($ALL)"
run_tests all pass "$ALL" "${FILES[@]}" || rc=1
if [ "$EACH" = 1 ]; then
  while IFS=$'\t' read -r fix file; do
    one="$("$PY" -m kvverify.targets.overlay "$fix")"
    run_tests "$fix" pass "$one" "$file" || rc=1
  done <"$TMP/pairs"
fi
[ "$rc" = 0 ] && echo "== finding patches: every test fails before and passes after" || echo "== finding patches: FAILED" >&2
exit "$rc"
