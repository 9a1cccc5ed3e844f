#!/usr/bin/env bash
# Makes an upgrade fixture: the data directory an older Weir leaves behind, kept in
# sql-tests/fixtures/upgrade/<rev>/ for sql-tests/tests/upgrade.rs, which starts the
# current binary on it (docs/savepoints.md, "Upgrading Weir").
#
#   scripts/make-upgrade-fixture.sh REV
#
# Builds REV (a commit or tag) in a git worktree, starts it on an empty data
# directory, runs sql-tests/fixtures/upgrade/workload.sql with psql (tables, views of
# each stateful kind, writes, CHECKPOINT, SAVEPOINT before_upgrade, more writes,
# CHECKPOINT), stops it with SIGTERM and copies the data directory (catalog, table logs,
# checkpoints, savepoints) into the fixture folder with the revision it came from.
#
# The build shares the target folder ($CARGO_TARGET_DIR) so that dependencies are
# reused. REV's workspace crates then overwrite the current ones' artifacts (same
# names, newer files), so the script copies REV's binary away and touches every
# source file of the current checkout: the next build compiles the current crates
# again instead of taking REV's for fresh.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
REV="${1:?revision}"
SHORT="$(git rev-parse --short=7 "$REV^{commit}")"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}"
OUT="$ROOT/sql-tests/fixtures/upgrade/$SHORT"
WORK="$(mktemp -d /tmp/weir-fixture-XXXXXX)"
PORT="${PORT:-6599}"
# (`kill 0` would signal the whole process group, a caller's too: only a set PID.)
trap 'git -C "$ROOT" worktree remove --force "$WORK/src" >/dev/null 2>&1 || true; if [ -n "${PID:-}" ]; then kill "$PID" 2>/dev/null || true; fi' EXIT

git worktree add --detach "$WORK/src" "$REV" >/dev/null
(cd "$WORK/src" && cargo build --bin weir)
cp "$CARGO_TARGET_DIR/debug/weir" "$WORK/weir-$SHORT"
find "$ROOT"/{executor,planner,storage,server,sql-tests} -name '*.rs' -exec touch {} +

# Only flags every build has (older ones lack --web-port and --metrics-port).
"$WORK/weir-$SHORT" --listen "127.0.0.1:$PORT" --data-dir "$WORK/data" >"$WORK/log" 2>&1 &
PID=$!
for _ in $(seq 1 100); do
  psql -X -q -h 127.0.0.1 -p "$PORT" -U weir -d weir -c "SELECT 1" >/dev/null 2>&1 && break
  sleep 0.2
done
psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U weir -d weir \
  -f "$ROOT/sql-tests/fixtures/upgrade/workload.sql"
kill -TERM "$PID"
wait "$PID" || true
PID=

rm -rf "$OUT" && mkdir -p "$OUT"
cp -r "$WORK/data" "$OUT/data"
{
  echo "rev: $(git rev-parse "$REV^{commit}")"
  echo "date: $(git log -1 --format=%cI "$REV")"
  echo "subject: $(git log -1 --format=%s "$REV" | cut -c1-72)"
  echo "made: $(date -u +%Y-%m-%dT%H:%M:%SZ) by scripts/make-upgrade-fixture.sh"
} >"$OUT/REVISION"
echo "fixture written to $OUT ($(du -sh "$OUT" | cut -f1))"
