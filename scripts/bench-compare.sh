#!/usr/bin/env bash
# Two builds of Weir side by side, interleaved: for each round, every benchmark runs
# once with the first binary and once with the second (alternating which goes
# first), so the VM's drift over the sitting hits both alike. Prints each run and
# then the median per benchmark and binary, and the ratio second / first.
#
#   ROUNDS=3 ./scripts/bench-compare.sh BEFORE_BIN AFTER_BIN
#   BENCHES="q7 q9" PAR=1 EVENTS=10000000 ./scripts/bench-compare.sh BEFORE_BIN AFTER_BIN
#
# Build the two binaries first, e.g. from two git worktrees:
#   git worktree add /tmp/before <commit> && (cd /tmp/before && cargo build --release)
# Benchmarks (BENCHES): Nexmark q0, q4, q5, q7 (EVENTS = 10M events, PAR = 1, at 10M
# events/s of event time; `weir bench nexmark`, its peak RSS printed per run), ingest
# into a GROUP BY view (3M rows) with checkpoints off and every 1 s (`weir bench
# ingest`), and the checkpoint overhead that follows from them.
set -euo pipefail
BEFORE=${1:?before binary}
AFTER=${2:?after binary}
ROUNDS=${ROUNDS:-3}
EVENTS=${EVENTS:-10000000}
PAR=${PAR:-1}
declare -A runs

nexmark() { # bin query -> its summary line (stderr), events/s (stdout)
  local line
  line=$("$1" bench nexmark --query "$2" --events "$EVENTS" --parallelism "$PAR" 2>/dev/null |
    grep '^nexmark')
  echo "  $line" >&2
  grep -o 'events_per_s=[0-9]*' <<<"$line" | cut -d= -f2
}
ingest() { # bin interval -> rows/s
  "$1" bench ingest --rows 3000000 --groups 300000 --batch 100000 --parallelism 1 \
    --checkpoint-interval "$2" 2>/dev/null | grep '^ingest' | grep -o 'rows_per_s=[0-9]*' | cut -d= -f2
}
one() { # label bin bench...
  local label=$1 bin=$2 name=$3
  shift 3
  local rate
  rate=$("$@" | tail -1)
  echo "round=$round bench=$name build=$label rate=$rate"
  runs["$name/$label"]="${runs["$name/$label"]:-} $rate"
}

read -r -a BENCHES <<<"${BENCHES:-q0 q4 q5 q7 ingest-off ingest-1s}"
for round in $(seq 1 "$ROUNDS"); do
  order=(before after)
  if (( round % 2 == 0 )); then order=(after before); fi
  for b in "${BENCHES[@]}"; do
    for label in "${order[@]}"; do
      bin=$BEFORE
      [ "$label" = after ] && bin=$AFTER
      case $b in
        ingest-off) one "$label" "$bin" "$b" ingest "$bin" off ;;
        ingest-1s) one "$label" "$bin" "$b" ingest "$bin" 1s ;;
        *) one "$label" "$bin" "$b" nexmark "$bin" "$b" ;;
      esac
    done
  done
done
median() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : int((a[NR/2]+a[NR/2+1])/2)}'; }
echo "| benchmark | before (median) | after (median) | after / before |"
echo "| --- | ---: | ---: | ---: |"
for b in "${BENCHES[@]}"; do
  x=$(median "${runs["$b/before"]}")
  y=$(median "${runs["$b/after"]}")
  echo "| $b | $x | $y | $(awk -v x="$x" -v y="$y" 'BEGIN {printf "%.2f", y / x}') |"
done
