#!/usr/bin/env bash
# The GPU suite on every core (one pytest run under pytest-xdist, a test dependency) while compute-sanitizer runs
# memcheck and racecheck over tools/sanitize_*.py (or the scripts named in $SANITIZE); logs and a summary under
# $OUT (default /tmp/gpu_suite). Usage: tools/gpu_suite.sh [SECONDS] [WORKERS]
set -u
T=${1:-480}
N=${2:-14}
OUT=${OUT:-/tmp/gpu_suite}; mkdir -p "$OUT"
cd "$(dirname "$0")/.."
SCRIPTS=${SANITIZE:-$(ls tools/sanitize_*.py)}
( timeout "$T" python3 -m pytest -q -m gpu -p no:cacheprovider -o addopts="" -n "$N" tests > "$OUT/suite.log" 2>&1
  echo "suite rc=$? $(tail -1 "$OUT/suite.log")" >> "$OUT/summary.txt"
  grep -E "^(FAILED|ERROR) " "$OUT/suite.log" >> "$OUT/summary.txt" ) &
for tool in memcheck racecheck; do
  ( for script in $SCRIPTS; do
      timeout "$T" compute-sanitizer --tool $tool --error-exitcode 9 python3 "$script" >> "$OUT/$tool.log" 2>&1
      echo "$tool $script rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.log" | tail -1)" >> "$OUT/summary.txt"
    done ) &
done
wait
cat "$OUT/summary.txt"
