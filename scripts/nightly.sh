#!/usr/bin/env bash
# The nightly fuzzing run, locally: what .github/workflows/nightly.yml runs, on one machine.
#
#   scripts/nightly.sh [SECONDS] [JOBS]
#
# Runs JOBS (default: the number of cores) `kvverify fuzz --profile nightly` processes in
# parallel, each on its own shard of the properties, for SECONDS (default 1800) each,
# sharing one example database (KVVERIFY_DB, default .hypothesis/nightly-db, kept between
# runs so failures found tonight replay tomorrow). Then renders reports/index.html and
# exits 1 if any counterexample report was written by this run.
#
# Environment: KVVERIFY (the command, default `kvverify`; e.g. .venv/bin/kvverify),
# KVVERIFY_SEED (default: today's date), KVVERIFY_DB, KVVERIFY_REPORTS_DIR (default reports).
set -euo pipefail
cd "$(dirname "$0")/.."

budget="${1:-1800}"
jobs="${2:-$(nproc 2>/dev/null || echo 2)}"
seed="${KVVERIFY_SEED:-$(date +%Y%m%d)}"
kv="${KVVERIFY:-kvverify}"
export KVVERIFY_DB="${KVVERIFY_DB:-.hypothesis/nightly-db}"
export KVVERIFY_REPORTS_DIR="${KVVERIFY_REPORTS_DIR:-reports}"
mkdir -p "$KVVERIFY_REPORTS_DIR" "$KVVERIFY_DB"
logs="$KVVERIFY_REPORTS_DIR/nightly-logs"
mkdir -p "$logs"
marker="$(mktemp)"
trap 'rm -f "$marker"' EXIT

echo "kvverify nightly: $jobs shard(s) x ${budget}s, seed $seed, database $KVVERIFY_DB"
pids=()
for i in $(seq 1 "$jobs"); do
  "$kv" fuzz --profile nightly --seconds "$budget" --shard "$i/$jobs" --seed "$seed" --no-progress \
    >"$logs/shard-$i.log" 2>&1 &
  pids+=("$!")
done
status=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then status=1; echo "shard $((i + 1))/$jobs: failures (see $logs/shard-$((i + 1)).log)"; fi
done
"$kv" report >/dev/null
new=$(find "$KVVERIFY_REPORTS_DIR" -maxdepth 1 -name '*.json' -newer "$marker" | wc -l)
if [ "$new" -gt 0 ]; then
  echo "kvverify nightly: $new counterexample report(s) written; open $KVVERIFY_REPORTS_DIR/index.html," \
       "replay one with: $kv replay $KVVERIFY_REPORTS_DIR/<report>.json"
  exit 1
fi
if [ "$status" -ne 0 ]; then
  echo "kvverify nightly: a shard failed without writing a report (see $logs)"
  exit 1
fi
echo "kvverify nightly: no counterexample reports"
