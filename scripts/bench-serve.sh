#!/usr/bin/env bash
# Serving benchmark: pgbench against Weir and a local PostgreSQL 15, in one run.
#
#   ./scripts/bench-serve.sh [seconds-per-run] [rounds] [protocol]
#
# Workload (bench/serve/): a table t of 100,000 rows and a 100-row GROUP BY view v;
# "mixed" is half `UPDATE t SET v = v + 1 WHERE id = :id`, half
# `SELECT n, total FROM v WHERE g = :g`; "read" is the SELECT alone. Each round runs,
# interleaved: mixed at 10 and 64 clients against PostgreSQL, Weir, and Weir with
# read-after-write on; then read-only at 64 clients against PostgreSQL and Weir.
# protocol is pgbench's -M: simple (default) or prepared.
#
# Both servers are durable per statement (PostgreSQL: fsync and synchronous_commit
# on, its defaults; Weir: the table log fsynced before the acknowledgement). What
# differs: PostgreSQL's v is a materialized view refreshed once (it cannot maintain it
# incrementally), so its UPDATEs maintain no view; Weir's view is kept current.
#
# At the end it checks that nothing was lost: Weir's table holds every acknowledged
# UPDATE (sum(v) = UPDATE transactions pgbench counted), and its view equals the
# view's query. Installs postgresql-15 (server and pgbench) when missing; builds the
# release binary (a cold release build takes ~35 min on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
source scripts/prereqs.sh
need_build_tools
PGBIN=/usr/lib/postgresql/15/bin
if [ ! -x "$PGBIN/postgres" ] || ! command -v pgbench >/dev/null 2>&1; then
  apt_install postgresql-15 postgresql-client-15
fi
DUR="${1:-15}"
ROUNDS="${2:-2}"
PROTOCOL="${3:-simple}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}"
# WEIR_BIN: a binary to measure instead of the release build.
if [ -z "${WEIR_BIN:-}" ]; then
  cargo build --release --bin weir
  WEIR_BIN="$CARGO_TARGET_DIR/release/weir"
fi

WORK="$(mktemp -d /tmp/weir-bench-serve.XXXXXX)"
chmod 755 "$WORK"
mkdir -p "$WORK/logs"
PG_PORT=5499
WEIR_PORT=6599
WEIR_PID=""

# PostgreSQL refuses to run as root: its server runs as the `postgres` user.
as_postgres() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

cleanup() {
  [ -n "$WEIR_PID" ] && kill "$WEIR_PID" 2>/dev/null || true
  as_postgres "$PGBIN/pg_ctl" -D "$WORK/pg" -m immediate stop >/dev/null 2>&1 || true
}
trap cleanup EXIT

mkdir -p "$WORK/pg"
[ "$(id -u)" -eq 0 ] && chown postgres "$WORK/pg"
as_postgres "$PGBIN/initdb" -D "$WORK/pg" -A trust -U postgres >/dev/null
as_postgres "$PGBIN/pg_ctl" -D "$WORK/pg" -l "$WORK/pg/server.log" -w \
  -o "-p $PG_PORT -k $WORK/pg -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null
psql -X -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 \
  -f bench/serve/setup-postgres.sql >/dev/null

cp "$WEIR_BIN" "$WORK/weir"
"$WORK/weir" --data-dir "$WORK/weir-data" --listen "127.0.0.1:$WEIR_PORT" --metrics-port 0 \
  >"$WORK/weir.log" 2>&1 &
WEIR_PID=$!
for _ in $(seq 1 100); do
  psql -X -q -h 127.0.0.1 -p "$WEIR_PORT" -U weir -d weir -c "SELECT 1" >/dev/null 2>&1 && break
  sleep 0.2
done
psql -X -q -h 127.0.0.1 -p "$WEIR_PORT" -U weir -d weir -v ON_ERROR_STOP=1 \
  -f bench/serve/setup-weir.sql >/dev/null

# run <target> <workload> <clients> <round>
run() {
  local target=$1 workload=$2 clients=$3 round=$4 port user options=""
  case $target in
    postgres) port=$PG_PORT; user=postgres ;;
    weir) port=$WEIR_PORT; user=weir; options="-c read_after_write=off" ;;
    weir-raw) port=$WEIR_PORT; user=weir; options="-c read_after_write=on" ;;
  esac
  local scripts=(-f bench/serve/select.sql@1)
  [ "$workload" = mixed ] && scripts=(-f bench/serve/update.sql@1 -f bench/serve/select.sql@1)
  local name="$target.$workload.c$clients.r$round"
  PGOPTIONS="$options" pgbench -n -M "$PROTOCOL" -h 127.0.0.1 -p "$port" -U "$user" \
    -c "$clients" -j 2 -T "$DUR" "${scripts[@]}" -l --log-prefix="$WORK/logs/$name" \
    "$([ $target = postgres ] && echo postgres || echo weir)" >"$WORK/logs/$name.out" 2>&1 || {
    echo "pgbench failed for $name:" >&2
    tail -20 "$WORK/logs/$name.out" >&2
    exit 1
  }
}

for round in $(seq 1 "$ROUNDS"); do
  for clients in 10 64; do
    for target in postgres weir weir-raw; do
      run "$target" mixed "$clients" "$round"
    done
  done
  for target in postgres weir; do
    run "$target" read 64 "$round"
  done
done

WEIR_SQL=(psql -X -A -t -h 127.0.0.1 -p "$WEIR_PORT" -U weir -d weir)
"${WEIR_SQL[@]}" -c "FLUSH" >/dev/null
SUM_V=$("${WEIR_SQL[@]}" -c "SELECT sum(v) FROM t")
VIEW=$("${WEIR_SQL[@]}" -c "SELECT g, n, total FROM v ORDER BY g")
QUERY=$("${WEIR_SQL[@]}" -c "SELECT g, count(*), sum(v) FROM t GROUP BY g ORDER BY g")
VIEW_OK=false
[ "$VIEW" = "$QUERY" ] && VIEW_OK=true
"${WEIR_PYTHON:-python3}" "$ROOT/scripts/bench-serve-report.py" "$WORK/logs" "$SUM_V" "$VIEW_OK" \
  "$PROTOCOL" "$DUR"
