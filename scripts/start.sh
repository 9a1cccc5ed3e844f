#!/usr/bin/env bash
# Builds Weir (release) and starts it on its embedded defaults:
# Postgres wire protocol on 127.0.0.1:6543, data in ./weir-data.
# Extra arguments go to `weir` (e.g. --listen, --data-dir, --config, --parallelism).
# Installs Debian's libclang-dev when no loadable libclang is present (scripts/prereqs.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}"
. ./scripts/prereqs.sh
need_build_tools
cargo build --release --bin weir
exec "$CARGO_TARGET_DIR/release/weir" "$@"
