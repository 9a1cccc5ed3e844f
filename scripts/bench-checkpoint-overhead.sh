#!/usr/bin/env bash
# Checkpoint overhead: `weir bench ingest` with checkpoints off, every 10 s and every
# 1 s, interleaved ROUNDS times (this machine's run-to-run noise is about ±10%, so one
# run per setting says little), then the median rows/s per setting and the overhead
# against `off`.
#
#   ROUNDS=5 ./scripts/bench-checkpoint-overhead.sh [extra `weir bench ingest` args]
#
# Uses the release binary (built if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}
WEIR=${WEIR_BIN:-$CARGO_TARGET_DIR/release/weir}
[ -x "$WEIR" ] || cargo build --release --bin weir
ROUNDS=${ROUNDS:-5}
ARGS=(--rows 3000000 --groups 300000 --batch 100000 --parallelism 1 "$@")
declare -A runs
for round in $(seq 1 "$ROUNDS"); do
  for interval in off 10s 1s; do
    line=$("$WEIR" bench ingest "${ARGS[@]}" --checkpoint-interval "$interval" 2>/dev/null | grep '^ingest')
    rate=$(grep -o 'rows_per_s=[0-9]*' <<<"$line" | cut -d= -f2)
    done_cp=$(grep -o 'checkpoints_completed=[0-9]*' <<<"$line" | cut -d= -f2)
    echo "round $round interval=$interval rows/s=$rate checkpoints=$done_cp"
    runs[$interval]="${runs[$interval]:-} $rate"
  done
done
median() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : int((a[NR/2]+a[NR/2+1])/2)}'; }
off=$(median "${runs[off]}")
echo "| interval | median rows/s | overhead vs off |"
echo "| --- | --- | --- |"
for interval in off 10s 1s; do
  m=$(median "${runs[$interval]}")
  echo "| $interval | $m | $(awk -v o="$off" -v m="$m" 'BEGIN {printf "%.1f%%", (o-m)*100/o}') |"
done
