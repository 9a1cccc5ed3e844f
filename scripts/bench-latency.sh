#!/usr/bin/env bash
# Latency against throughput, and checkpoints under backpressure (docs/nexmark.md,
# "Latency and buffering").
#
# 1. End-to-end latency (a row's due time at the source to its write at the sink)
#    of q0 and q5 at fixed input rates (`nexmark.max.events.per.second`, event time
#    running with the wall clock) for three `execution.buffer-timeout.interval`
#    settings, with the events/s reached and the CPU used.
# 2. A slow operator (`weir bench nexmark --query slow`: an md5 of each bid's extra
#    repeated 512 times, per auction) at full input speed, so that backpressure
#    reaches the source, with buffer debloating off and on: checkpoint duration and
#    alignment time.
#
#   ./scripts/bench-latency.sh            # both parts (about 25 minutes)
#   PART=latency RATES=10000 TIMEOUTS="0 100ms" ./scripts/bench-latency.sh
#   PART=backpressure REPS=3 ./scripts/bench-latency.sh
#
# Knobs (defaults in brackets): RATES ["10000 100000 1000000"], TIMEOUTS
# ["0 100ms -1"], QUERIES ["q0 q5"], SECONDS_q0 [30], SECONDS_q5 [60] (run length at
# each rate), PAR [1] (latency runs), REPS [2] and SLOW_EVENTS [4000000] and
# SLOW_PAR [2] (backpressure runs, debloating off and on alternating).
# Rows go to $OUT (default ~/.cache/weir-bench/latency-<time>.tsv).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}"
PART="${PART:-all}"
RATES="${RATES:-10000 100000 1000000}"
TIMEOUTS="${TIMEOUTS:-0 100ms -1}"
QUERIES="${QUERIES:-q0 q5}"
PAR="${PAR:-1}"
REPS="${REPS:-2}"
SLOW_EVENTS="${SLOW_EVENTS:-4000000}"
SLOW_PAR="${SLOW_PAR:-2}"
mkdir -p "$HOME/.cache/weir-bench"
OUT="${OUT:-$HOME/.cache/weir-bench/latency-$(date -u +%Y%m%dT%H%M%S).tsv}"

cargo build --release --bin weir >&2
WEIR="$CARGO_TARGET_DIR/release/weir"

# The value of `key=` in a line of the bench's output.
field() { sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" | head -1; }

echo -e "part\tquery\trate\tbuffer_timeout\tdebloat\tevents_per_s\tcpu_s\tp50_ms\tp99_ms\tlatency_rows\tcheckpoints\tckpt_p50_ms\tckpt_max_ms\talign_p50_ms\talign_max_ms\tpeak_rss_mb" > "$OUT"

run() { # part query rate timeout debloat args...
  local part=$1 q=$2 rate=$3 t=$4 d=$5
  shift 5
  local out
  out=$("$WEIR" bench nexmark --query "$q" "$@" 2>/dev/null)
  local main lat ck
  main=$(grep "^nexmark " <<<"$out")
  lat=$(grep "^latency $q:" <<<"$out" || true)
  ck=$(grep "^checkpoints:" <<<"$out" || true)
  echo -e "$part\t$q\t$rate\t$t\t$d\t$(field events_per_s <<<"$main")\t$(field cpu_seconds <<<"$main")\t$(field p50_ms <<<"$lat")\t$(field p99_ms <<<"$lat")\t$(field rows <<<"$lat")\t$(field completed <<<"$ck")\t$(field duration_ms_p50 <<<"$ck")\t$(field duration_ms_max <<<"$ck")\t$(field alignment_ms_p50 <<<"$ck")\t$(field alignment_ms_max <<<"$ck")\t$(field peak_rss_mb <<<"$main")" | tee -a "$OUT"
}

if [ "$PART" = all ] || [ "$PART" = latency ]; then
  for rate in $RATES; do
    for q in $QUERIES; do
      secs_var="SECONDS_$q"
      secs="${!secs_var:-30}"
      events=$((rate * secs))
      for t in $TIMEOUTS; do
        run latency "$q" "$rate" "$t" off --events "$events" --parallelism "$PAR" \
          --max-events-per-second "$rate" --buffer-timeout "$t"
      done
    done
  done
fi

if [ "$PART" = all ] || [ "$PART" = backpressure ]; then
  for rep in $(seq 1 "$REPS"); do
    order="off on"
    [ $((rep % 2)) -eq 0 ] && order="on off"
    for d in $order; do
      flag=()
      [ "$d" = on ] && flag=(--debloat)
      run backpressure slow - 100ms "$d" --events "$SLOW_EVENTS" --parallelism "$SLOW_PAR" "${flag[@]}"
    done
  done
fi
echo "rows: $OUT" >&2
