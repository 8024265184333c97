#!/usr/bin/env bash
# Mutation testing of the reference modules with mutmut 3 (docs/mutation.md).
#
#   scripts/mutation.sh [MODULE...]     MODULE: arith planner grouping block_sizes pool
#                                       managers kv_cache_manager scheduler (default: all),
#                                       or one manager file: managers.full_attention, ...
#
# mutmut copies the tree to mutants/, collects which tests call which function once
# (its stats), then runs only those tests against each mutant (per-function test
# selection), `MUTMUT_CHILDREN` at a time (default 2). Tests run under the `mutation`
# Hypothesis profile (derandomized, KVVERIFY_MUTATION_EXAMPLES examples, default 20).
# Results accumulate in mutants/: a re-run only runs the mutants without a verdict
# (MUTATION_SELECT=pending), MUTATION_SELECT=survivors re-checks the survivors,
# MUTATION_SELECT=all everything; delete mutants/ to start over. The per-module survivors report is written to
# reports/mutation/summary.{json,md}.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
CHILDREN="${MUTMUT_CHILDREN:-2}"
ALL=(arith planner grouping block_sizes pool managers kv_cache_manager scheduler)
modules=("$@")
[ "${#modules[@]}" -gt 0 ] || modules=("${ALL[@]}")
patterns=()
for m in "${modules[@]}"; do
  case " ${ALL[*]} " in
    *" $m "*) ;;
    *) [ -f "kvverify/reference/${m//.//}.py" ] && [[ "$m" == managers.* ]] \
         || { echo "unknown module '$m' (choose from: ${ALL[*]}, or managers.NAME)" >&2; exit 2; } ;;
  esac
  patterns+=("kvverify.reference.$m.*")
done
# MUTATION_SELECT: all (default on a fresh mutants/), pending (mutants without a verdict;
# default when mutants/ exists), survivors (re-check the survivors after adding a property).
select="${MUTATION_SELECT:-}"
[ -n "$select" ] || { [ -d mutants ] && select=pending || select=all; }
names=("${patterns[@]}")
if [ "$select" != all ]; then
  mapfile -t names < <("$PY" scripts/mutation_report.py --select "$select" "${modules[@]}" | grep -v '^$' || true)
  if [ "${#names[@]}" -eq 0 ]; then
    echo "mutation: no $select mutants in: ${modules[*]}"
    exec "$PY" scripts/mutation_report.py "${modules[@]}"
  fi
fi
start=$SECONDS
"$PY" -m mutmut run --max-children "$CHILDREN" "${names[@]}" || true
echo "mutation: ${#names[@]} pattern(s)/mutant(s) ($select) in $((SECONDS - start)) s"
"$PY" scripts/mutation_report.py "${modules[@]}"
