#!/usr/bin/env bash
# The nightly fuzzing run, locally: what .github/workflows/nightly.yml runs, on one machine.
#
#   scripts/nightly.sh [SECONDS] [JOBS]
#
# Runs JOBS (default: the number of cores) `kvverify fuzz --profile nightly` processes in
# parallel, each on its own shard of the properties, for SECONDS (default 1800) each,
# sharing one example database (KVVERIFY_DB: a directory, default .hypothesis/nightly-db,
# kept between runs so failures found tonight replay tomorrow, or a redis://HOST:PORT/DB URL
# shared with other machines; the `redis` extra). One database shared live needs no merge.
# Then prints what was tested (Hypothesis observability, per property: the coverage table
# the workflow puts on the run page), renders reports/index.html, and exits 1 if any
# counterexample report was written by this run. Replay what it found, as a PR would:
#   KVVERIFY_DB=.hypothesis/nightly-db python -m pytest properties/ --hypothesis-profile=replay
# (docs/nightly.md).
#
# Environment: KVVERIFY (the command, default `kvverify`; e.g. .venv/bin/kvverify),
# KVVERIFY_TARGET (default reference), KVVERIFY_DB, KVVERIFY_REPORTS_DIR (default reports).
# Hypothesis' observability is on (the coverage table); it costs CPU per example (docs/nightly.md).
# No seed: Hypothesis neither saves to nor replays from the database for a seeded test.
set -euo pipefail
cd "$(dirname "$0")/.."

budget="${1:-1800}"
jobs="${2:-$(nproc 2>/dev/null || echo 2)}"
kv="${KVVERIFY:-kvverify}"
target="${KVVERIFY_TARGET:-reference}"
export KVVERIFY_DB="${KVVERIFY_DB:-.hypothesis/nightly-db}"
export KVVERIFY_REPORTS_DIR="${KVVERIFY_REPORTS_DIR:-reports}"
case "$KVVERIFY_DB" in
  redis://*|rediss://*|unix://*) ;;
  *) mkdir -p "$KVVERIFY_DB" ;;
esac
mkdir -p "$KVVERIFY_REPORTS_DIR"
logs="$KVVERIFY_REPORTS_DIR/nightly-logs"
mkdir -p "$logs"
marker="$(mktemp)"
trap 'rm -f "$marker"' EXIT

echo "kvverify nightly: $jobs shard(s) x ${budget}s, target $target, database $KVVERIFY_DB"
pids=()
for i in $(seq 1 "$jobs"); do
  # each job its own Hypothesis storage directory: --coverage-json empties the observation
  # files it has read, which must be its own
  rm -rf "$logs/hypothesis-$i"
  (
    export HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY=1 HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY_NOCOVER=1
    export HYPOTHESIS_STORAGE_DIRECTORY="$logs/hypothesis-$i"
    "$kv" fuzz --profile nightly --seconds "$budget" --shard "$i/$jobs" --target "$target" --no-progress \
      --coverage-json "$logs/coverage-$i.json"
  ) >"$logs/shard-$i.log" 2>&1 &
  pids+=("$!")
done
status=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then status=1; echo "shard $((i + 1))/$jobs: failures (see $logs/shard-$((i + 1)).log)"; fi
done
set -- "$logs"/coverage-*.json
if [ -f "$1" ]; then
  py="$(dirname "$(command -v "$kv")")/python"
  [ -x "$py" ] || py=python3
  "$py" -m kvverify.nightly coverage --combine "$@" --title "What was tested ($target, $jobs shard(s))" \
    | tee "$logs/coverage.md"
fi
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
