#!/usr/bin/env bash
# Runs `weir bench nexmark` for every query at parallelism 1 and 2 (one process per
# run, so each peak RSS is that run's) and prints one result line per run.
#
#   ./scripts/bench-nexmark.sh [events] [queries...]
#   ./scripts/bench-nexmark.sh 10000000 source q0 q1 q2 q3 q4 q5 q7 q8
#
# Builds the release binary first (a cold release build takes ~35 min on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}"
EVENTS="${1:-10000000}"
shift || true
QUERIES=("$@")
if [ ${#QUERIES[@]} -eq 0 ]; then
  QUERIES=(source q0 q1 q2 q3 q4 q5 q7 q8)
fi
cargo build --release --bin weir
for q in "${QUERIES[@]}"; do
  for p in 1 2; do
    "$CARGO_TARGET_DIR/release/weir" bench nexmark --query "$q" --events "$EVENTS" \
      --parallelism "$p" 2>/dev/null | grep '^nexmark'
  done
done
