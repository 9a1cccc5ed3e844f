#!/usr/bin/env bash
# Builds Weir (release) and starts it on its embedded defaults:
# Postgres wire protocol on 127.0.0.1:6543, data in ./weir-data.
# Extra arguments go to `weir` (e.g. --listen, --data-dir, --config, --parallelism).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}"
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is required: install Rust from your package manager or rustup" >&2
  exit 1
fi
# RocksDB (the rocksdb state backend) is compiled from source: bindgen needs libclang.
if ! ls /usr/lib/llvm-*/lib/libclang.so* >/dev/null 2>&1 && ! ls /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q && $SUDO apt-get install -y -q libclang-dev clang
fi
cargo build --release --bin weir
exec "$CARGO_TARGET_DIR/release/weir" "$@"
