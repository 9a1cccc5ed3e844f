#!/usr/bin/env bash
# Runs the whole test suite: formatting, unit tests of every crate, and the SQL suites
# (sqllogictest files, differential and kill -9 crash tests) against real `weir`
# processes over the Postgres wire protocol.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}"
export RUST_BACKTRACE="${RUST_BACKTRACE:-0}"
# The client tests drive real psql; install it when missing (Debian/Ubuntu).
if ! command -v psql >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q && $SUDO apt-get install -y -q postgresql-client
fi
cargo fmt --all -- --check
# The SQL tests start the `weir` binary, so it is built first.
cargo build --bin weir
cargo test --workspace --no-fail-fast
