#!/usr/bin/env bash
# Cost of high availability: INSERT latency (p50, p99) and throughput at 1 and 64
# clients with HA off (table log fsynced on the local disk) and on (the table log
# also committed to the cluster log on the S3 endpoint before the acknowledgement),
# interleaved in one run.
#
#   ./scripts/bench-ha.sh [seconds-per-run] [rounds]
#
# The S3 endpoint is moto on loopback (the one the tests use): its PUT costs a few
# milliseconds of Python; a real S3 PUT is 10-30 ms, so the HA-on latency here is a
# lower bound and the group commit (many sessions' rows per segment) matters more there.
# At the end it checks that nothing was lost: each Weir's table holds exactly the rows
# pgbench counted as acknowledged, and its view equals its query.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
source scripts/prereqs.sh
need_test_tools
command -v pgbench >/dev/null 2>&1 || apt_install postgresql-15 postgresql-client-15
DUR="${1:-10}"
ROUNDS="${2:-3}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}"
if [ -z "${WEIR_BIN:-}" ]; then
  cargo build --release --bin weir
  WEIR_BIN="$CARGO_TARGET_DIR/release/weir"
fi
WORK="$(mktemp -d /tmp/weir-bench-ha.XXXXXX)"
mkdir -p "$WORK/logs"
S3_PORT=39071
OFF_PORT=6571
ON_PORT=6572
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

"$VENV/bin/moto_server" -H 127.0.0.1 -p "$S3_PORT" >"$WORK/moto.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do (echo >/dev/tcp/127.0.0.1/$S3_PORT) 2>/dev/null && break; sleep 0.1; done
curl -s -X PUT "http://127.0.0.1:$S3_PORT/weir-bench-ha" >/dev/null
cat >"$WORK/on.toml" <<TOML
[high-availability]
type = "object-store"
storageDir = "s3://weir-bench-ha/ha"
cluster-id = "bench"
[s3]
endpoint = "http://127.0.0.1:$S3_PORT"
region = "us-east-1"
access-key-id = "testing"
secret-access-key = "testing"
allow-http = true
TOML
: >"$WORK/off.toml"
for mode in off on; do
  port=$OFF_PORT; [ $mode = on ] && port=$ON_PORT
  "$WEIR_BIN" --data-dir "$WORK/$mode-data" --listen "127.0.0.1:$port" --metrics-port 0 \
    --config "$WORK/$mode.toml" >"$WORK/weir-$mode.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 200); do
    psql -X -q -h 127.0.0.1 -p "$port" -U weir -d weir -c "SELECT 1" >/dev/null 2>&1 && break
    sleep 0.1
  done
  psql -X -q -h 127.0.0.1 -p "$port" -U weir -d weir -v ON_ERROR_STOP=1 -f bench/ha/setup.sql
done

for round in $(seq 1 "$ROUNDS"); do
  for clients in 1 64; do
    for mode in off on; do
      port=$OFF_PORT; [ $mode = on ] && port=$ON_PORT
      name="$mode.c$clients.r$round"
      pgbench -n -h 127.0.0.1 -p "$port" -U weir -c "$clients" -j 2 -T "$DUR" \
        -f bench/ha/insert.sql -l --log-prefix="$WORK/logs/$name" weir \
        >"$WORK/logs/$name.out" 2>&1 || { tail -20 "$WORK/logs/$name.out" >&2; exit 1; }
    done
  done
done

CHECKS=()
for mode in off on; do
  port=$OFF_PORT; [ $mode = on ] && port=$ON_PORT
  SQL=(psql -X -A -t -h 127.0.0.1 -p "$port" -U weir -d weir)
  "${SQL[@]}" -c "FLUSH" >/dev/null
  rows=$("${SQL[@]}" -c "SELECT count(*) FROM ins")
  view=$("${SQL[@]}" -c "SELECT client, n FROM ins_counts ORDER BY client")
  query=$("${SQL[@]}" -c "SELECT client, count(*) FROM ins GROUP BY client ORDER BY client")
  CHECKS+=("$mode" "$rows" "$([ "$view" = "$query" ] && echo true || echo false)")
done
"${WEIR_PYTHON:-python3}" "$ROOT/scripts/bench-ha-report.py" "$WORK/logs" "$DUR" "${CHECKS[@]}"
echo "logs: $WORK"
