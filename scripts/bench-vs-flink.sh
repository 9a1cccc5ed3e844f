#!/usr/bin/env bash
# Nexmark, Weir against Apache Flink 2.3 on this machine, in one sitting: for every
# event rate, parallelism, query and repetition, Flink qN then Weir qN (alternating
# which goes first), so the VM's drift hits both alike. Both read the same events
# (the Flink harness's generator; Weir's `nexmark.generator = 'splittable-random'`),
# in the same shape (one source split into person/auction/bid by views), at the same
# event-time rate, with 10 s exactly-once checkpoints, hashmap state (Weir's default
# in-memory state) and blackhole sinks. Prints a table of medians and ratios.
#
#   ./scripts/bench-vs-flink.sh                 # the whole matrix (hours: see below)
#   QUERIES="q0 q5" PARS=1 RATES=10000000 REPS=3 ./scripts/bench-vs-flink.sh
#   ./scripts/bench-vs-flink.sh report FILE.tsv [MORE.tsv ...]
#                                               # the table of earlier sittings (several
#                                               # files: blocks of one matrix, one binary)
#
# Knobs (defaults in brackets):
#   QUERIES [every query Flink runs: q0-q5, q7-q12, q14-q22; not q6 (Nexmark's text
#            is not valid Flink SQL) or q13 (Flink 2.3 has no lookup source for it)]
#   PARS ["1 2"]   RATES ["10000 10000000"]
#   REPS [3]   EVENTS [10000000]          events per run, every query
#   EVENTS_q5=100000000 ...               events for one query (overrides EVENTS)
#   FLINK_JAVA_OPTS ["-Xms1g -Xmx12g"]    the harness's JVM heap
#   WEIR_BIN [build one]                  a Weir binary to run instead of building
#                                         `cargo build --release --bin weir` (a build
#                                         already made, e.g. `-p weir-server`, whose
#                                         dependency features differ from the
#                                         workspace's and would all rebuild)
#
# The harness (../shared/bench/flink-nexmark, read-only) is copied into
# $FLINK_BENCH_STATE/harness (default ~/.cache/weir-flink-bench) with Weir's Flink
# texts of q9-q22 (bench/flink-nexmark/) added to its sql/; it keeps its venv, jar,
# logs and raw rows in $FLINK_BENCH_STATE and is installed there on first use (PyPI
# apache-flink 2.3.0 and Debian's JDK 17). This sitting's rows go to
# $FLINK_BENCH_STATE/vs-flink/<start time>.tsv.
#
# Measured: events/s = events generated / the engine's own run time (Flink: the
# job's net runtime, job start to finish; Weir: source creation until every event
# has passed every sink). Memory: Weir's peak RSS; Flink's largest heap occupancy
# right after a GC (its live set, from -Xlog:gc) and its peak RSS. Weir's output
# (net rows, checksum) is printed per run; the tests check it against the query over
# a stored twin. Before each run both wait until other processes use < 0.25 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}"
export FLINK_BENCH_STATE="${FLINK_BENCH_STATE:-$HOME/.cache/weir-flink-bench}"
HARNESS="$FLINK_BENCH_STATE/harness"
OUT_DIR="$FLINK_BENCH_STATE/vs-flink"
mkdir -p "$OUT_DIR"

# One sitting at a time: a second one would reinstall the harness under the first
# and share its cores (the report needs neither).
if [ "${1:-}" != report ]; then
  exec 9>"$FLINK_BENCH_STATE/.sitting.lock"
  flock -n 9 || { echo "another sitting is running (lock $FLINK_BENCH_STATE/.sitting.lock)" >&2; exit 1; }
fi

if [ "${1:-}" = report ]; then
  shift
  python3 "$ROOT/scripts/bench-vs-flink-report.py" "${@:?tsv files}"
  exit 0
fi

QUERIES="${QUERIES:-q0 q1 q2 q3 q4 q5 q7 q8 q9 q10 q11 q12 q14 q15 q16 q17 q18 q19 q20 q21 q22}"
PARS="${PARS:-1 2}"
RATES="${RATES:-10000 10000000}"
REPS="${REPS:-3}"
EVENTS="${EVENTS:-10000000}"
export JAVA_OPTS="${FLINK_JAVA_OPTS:--Xms1g -Xmx12g}"

SHARED_HARNESS="$ROOT/../shared/bench/flink-nexmark"
if [ ! -x "$SHARED_HARNESS/run.sh" ]; then
  echo "the Flink Nexmark harness is not at $SHARED_HARNESS: it lives in the project's" >&2
  echo "shared folder beside a checkout, not in this repository" >&2
  exit 1
fi
rm -rf "$HARNESS" && mkdir -p "$HARNESS"
cp -r "$SHARED_HARNESS/." "$HARNESS/"
cp "$ROOT"/bench/flink-nexmark/q*.sql "$HARNESS/sql/"
if [ ! -x "$FLINK_BENCH_STATE/.venv/bin/python" ] || [ ! -f "$FLINK_BENCH_STATE/build/nexmark-gen.jar" ]; then
  command -v javac >/dev/null 2>&1 || {
    . ./scripts/prereqs.sh
    apt_install openjdk-17-jdk-headless
  }
  "$HARNESS/run.sh" install
fi
if [ -n "${WEIR_BIN:-}" ]; then
  WEIR="$WEIR_BIN"
else
  cargo build --release --bin weir
  WEIR="$CARGO_TARGET_DIR/release/weir"
fi

STAMP="$(date -u +%Y%m%dT%H%M%S)"
TSV="$OUT_DIR/$STAMP.tsv"
FLINK_RAW="$OUT_DIR/$STAMP-flink-raw.tsv"
printf 'engine\tquery\tpar\trate\tevents\trep\tseconds\tevents_per_s\tpeak_rss_mb\theap_after_gc_mb\tcheckpoints\toutput\tstarted\tpeak_anon_mb\n' >"$TSV"

HZ="$(getconf CLK_TCK)"
cpu_busy() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
# Waits (up to 20 min) until other processes use less than 0.25 cores.
wait_quiet() {
  local b0 b1
  for _ in $(seq 1 240); do
    b0="$(cpu_busy)"; sleep 5; b1="$(cpu_busy)"
    awk -v d="$((b1 - b0))" -v hz="$HZ" 'BEGIN{exit !(d/hz/5 < 0.25)}' && return 0
  done
}

events_for() { local v="EVENTS_$1"; echo "${!v:-$EVENTS}"; }

flink() { # query par rate events rep
  local q=$1 p=$2 rate=$3 ev=$4 rep=$5 started line id gc heap
  started="$(date -u +%H:%M:%S)"
  EVENT_RATE="$rate" RAW="$FLINK_RAW" "$HARNESS/run.sh" one "$q" "$p" hashmap "$ev" "$rep" >/dev/null
  line="$(tail -1 "$FLINK_RAW")"
  id="$(cut -f1 <<<"$line")"
  gc="$FLINK_BENCH_STATE/work/logs/$id.gc"
  heap="$(grep -oE '[0-9]+M->[0-9]+M' "$gc" 2>/dev/null | sed 's/.*->//; s/M//' | sort -n | tail -1)"
  awk -F'\t' -v q="$q" -v p="$p" -v r="$rate" -v ev="$ev" -v rep="$rep" -v heap="${heap:-0}" -v s="$started" \
    'BEGIN{OFS="\t"} { rc=$8; w=$9; if (rc != 0 || w == "") w = "nan";
      eps = (w == "nan") ? "nan" : sprintf("%.0f", ev / w);
      print "flink", q, p, r, ev, rep, w, eps, int($15/1024), heap, $16, "-", s, "-" }' <<<"$line" >>"$TSV"
}

weir() { # query par rate events rep
  local q=$1 p=$2 rate=$3 ev=$4 rep=$5 started out secs rss anon ckpts digest
  wait_quiet
  started="$(date -u +%H:%M:%S)"
  out="$("$WEIR" bench nexmark --query "$q" --events "$ev" --parallelism "$p" --event-rate "$rate" 2>/dev/null || true)"
  kv() { grep '^nexmark' <<<"$out" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
  secs="$(kv seconds)"; rss="$(kv peak_rss_mb)"; anon="$(kv peak_anon_mb)"; ckpts="$(kv checkpoints)"
  digest="$(grep "^output $q:" <<<"$out" | sed 's/^output [^ ]* //; s/ /,/')"
  awk -v q="$q" -v p="$p" -v r="$rate" -v ev="$ev" -v rep="$rep" -v w="${secs:-nan}" -v rss="${rss:-0}" \
    -v c="${ckpts:-0}" -v d="${digest:--}" -v s="$started" -v a="${anon:-0}" 'BEGIN{OFS="\t";
      eps = (w == "nan") ? "nan" : sprintf("%.0f", ev / w);
      print "weir", q, p, r, ev, rep, w, eps, rss, "-", c, d, s, a }' >>"$TSV"
}

n=0
for rate in $RATES; do
  for p in $PARS; do
    for q in $QUERIES; do
      ev="$(events_for "$q")"
      for rep in $(seq 1 "$REPS"); do
        n=$((n + 1))
        if ((n % 2)); then flink "$q" "$p" "$rate" "$ev" "$rep"; weir "$q" "$p" "$rate" "$ev" "$rep"
        else weir "$q" "$p" "$rate" "$ev" "$rep"; flink "$q" "$p" "$rate" "$ev" "$rep"; fi
        tail -2 "$TSV"
      done
    done
  done
done
echo "rows: $TSV"
python3 "$ROOT/scripts/bench-vs-flink-report.py" "$TSV"
