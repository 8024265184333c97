#!/usr/bin/env bash
# Try candidate kills in seconds, without a mutmut run (docs/mutation.md).
#
#   scripts/mutation_try.sh TEST... -- MUTANT...
#
# Runs pytest on TEST (paths or node ids, relative to the repository root) once per MUTANT
# (a full name, or one relative to kvverify.reference: grouping.x_get_kv_cache_groups__mutmut_15)
# inside mutmut's trampolined copy mutants/ (so mutants/ must exist: run scripts/mutation.sh once),
# with MUTANT_UNDER_TEST set, the `mutation` Hypothesis profile and -x; prints KILLED or SURVIVED
# per mutant. The TEST files are copied into mutants/ first (mutmut copies them again on its next
# run). Only mutmut's verdicts count as measured: re-run the survivors with
# MUTATION_SELECT=survivors scripts/mutation.sh MODULE afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -d mutants/kvverify ] || { echo "mutation_try: no mutants/ yet (run scripts/mutation.sh first)" >&2; exit 2; }
tests=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do tests+=("$1"); shift; done
[ $# -gt 1 ] && [ "${#tests[@]}" -gt 0 ] || { echo "usage: $0 TEST... -- MUTANT..." >&2; exit 2; }
shift
for t in "${tests[@]}"; do
  f="${t%%::*}"
  [ -e "$f" ] || { echo "mutation_try: no such test path: $f" >&2; exit 2; }
  [ -f "$f" ] && mkdir -p "mutants/$(dirname "$f")" && cp "$f" "mutants/$f"
done
cd mutants
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for m in "$@"; do
  [[ "$m" == kvverify.* ]] || m="kvverify.reference.$m"
  if MUTANT_UNDER_TEST="$m" "$PY" -m pytest -p no:xdist -p no:randomly -p no:cacheprovider \
       --hypothesis-profile=mutation -x -q "${tests[@]}" >"$log" 2>&1; then
    echo "SURVIVED $m"
  else
    echo "KILLED   $m $(grep -m1 -o '^FAILED [^ ]*' "$log" || true)"
  fi
done
