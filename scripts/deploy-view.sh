#!/usr/bin/env bash
# Deploys a changed materialized view with a savepoint before it and a rollback on
# failure: the recipe of docs/savepoints.md ("Deploying a changed query"), for CI/CD.
#
#   scripts/deploy-view.sh VIEW NEW_QUERY_FILE [CHECK_SQL]
#
# 1. `weir savepoint create` of the view (the state to deploy from and to go back to);
# 2. the view's current query, from pg_matviews.definition;
# 3. CREATE OR REPLACE MATERIALIZED VIEW VIEW WITH (restore_from = <savepoint>) AS
#    <the new query> (state matched by uid, so nothing is recomputed);
# 4. CHECK_SQL, if given, must answer `t` (a smoke test of the new view);
# 5. if 3 or 4 fails: the old query is put back from the same savepoint, and the script
#    exits 1. On success the savepoint is kept (drop it when no rollback is wanted).
#
# Environment: WEIR_HOST [127.0.0.1], WEIR_PORT [6543], WEIR_USER [weir], PGPASSWORD,
# WEIR [weir on PATH, else the release build], PSQL [psql].
set -euo pipefail
VIEW="${1:?view}"
NEW_QUERY_FILE="${2:?file with the new query}"
CHECK_SQL="${3:-}"
HOST="${WEIR_HOST:-127.0.0.1}"
PORT="${WEIR_PORT:-6543}"
USER_NAME="${WEIR_USER:-weir}"
PSQL="${PSQL:-psql}"
if [ -z "${WEIR:-}" ]; then
  WEIR="$(command -v weir || echo "${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}/release/weir")"
fi
conn=(--host "$HOST" --port "$PORT" --user "$USER_NAME")
sql() { "$PSQL" -X -q -t -A -v ON_ERROR_STOP=1 -h "$HOST" -p "$PORT" -U "$USER_NAME" -d weir -c "$1"; }
say() { echo "deploy $VIEW: $*" >&2; }

SAVEPOINT="deploy_${VIEW}_$(date -u +%Y%m%dT%H%M%S_%N)"
if ! out="$("$WEIR" savepoint create "$SAVEPOINT" --view "$VIEW" --json "${conn[@]}")"; then
  say "no savepoint, nothing changed: $out"
  exit 1
fi
say "savepoint $SAVEPOINT taken"
OLD_QUERY="$(sql "SELECT definition FROM pg_matviews WHERE matviewname = '$VIEW'")"
[ -n "$OLD_QUERY" ] || { say "no materialized view $VIEW"; exit 1; }

replace() { # $1: the query
  sql "CREATE OR REPLACE MATERIALIZED VIEW $VIEW WITH (restore_from = '$SAVEPOINT') AS ${1%;}"
}
rollback() {
  say "$1; rolling back to the query before, from savepoint $SAVEPOINT"
  if replace "$OLD_QUERY"; then
    say "rolled back"
  else
    say "ROLLBACK FAILED: restore by hand from savepoint $SAVEPOINT"
  fi
  exit 1
}

replace "$(cat "$NEW_QUERY_FILE")" || rollback "the new query was refused"
if [ -n "$CHECK_SQL" ]; then
  [ "$(sql "$CHECK_SQL" 2>/dev/null || true)" = "t" ] || rollback "the check failed: $CHECK_SQL"
fi
say "deployed (savepoint $SAVEPOINT kept for a later rollback)"
