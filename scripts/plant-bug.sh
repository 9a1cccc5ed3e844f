#!/usr/bin/env bash
# Plants one known bug in the working tree, rebuilds `weir`, runs the test that must
# catch it, and reverts the plant: the test failing is the expected outcome.
#
#   ./scripts/plant-bug.sh <bug>      # bugs: grant-ok avg-float restore-nothing ack-before-write
#                                     #       kafka-commit-twice (needs the broker: WEIR_TEST_KAFKA_BROKER,
#                                     #       WEIR_TEST_S3_ENDPOINT as ./scripts/test.sh exports them)
#
# Exits 0 when the test failed (the bug was caught), 1 when it passed. Needs a clean
# tree in server/, executor/ and storage/ (it reverts them with git checkout).
# docs/testing.md ("Tests that can fail") lists what each run printed.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}"
bug="${1:?usage: plant-bug.sh grant-ok|avg-float|restore-nothing|ack-before-write|kafka-commit-twice}"
if ! git diff --quiet -- server executor storage; then
  echo "server/, executor/ or storage/ has changes: commit or stash them first" >&2
  exit 2
fi
trap 'git checkout -- server executor storage' EXIT

# replace <file> <old> <new>: exactly one occurrence, or the plant is out of date.
replace() {
  python3 - "$@" <<'PY'
import sys
path, old, new = sys.argv[1:4]
text = open(path).read()
if text.count(old) != 1:
    sys.exit(f"plant out of date: {path} holds {text.count(old)} copies of the text to replace")
open(path, "w").write(text.replace(old, new))
PY
}

case $bug in
  grant-ok) # a bad statement answered Ok
    replace server/src/statements/mod.rs '        other => Err(SqlError::unsupported(format!(' \
'        Statement::Grant { .. } => Ok(crate::output::Output::Command { tag: "GRANT".into(), rows: None }),
        other => Err(SqlError::unsupported(format!('
    test=bad_input ;;
  avg-float) # avg of integers as float (DataFusion'"'"'s avg instead of Postgres'"'"'s)
    replace server/src/functions/mod.rs 'for f in numeric_aggregates::udafs() {' \
      'for f in numeric_aggregates::udafs().into_iter().take(1) {'
    test=slt ;;
  restore-nothing) # a savepoint restore that loads no state but reports the uids
    replace executor/src/savepoint.rs \
      'for u in saved.state.iter().filter(|u| m.matched.contains(&u.uid)) {' \
      'for u in saved.state.iter().filter(|u| m.matched.contains(&u.uid) && u.uid.is_empty()) {'
    test=savepoint ;;
  ack-before-write) # an acknowledged write held in memory until the next append
    replace storage/src/table_log.rs '        self.file.write_all(&buf)?;
        self.end += buf.len() as u64;' '        if let Some(prev) = self.held.replace(buf.clone()) {
            self.file.write_all(&prev)?;
        }
        self.end += buf.len() as u64;'
    replace storage/src/table_log.rs 'pub struct TableLog {' 'pub struct TableLog {
    held: Option<Vec<u8>>,'
    replace storage/src/table_log.rs '            TableLog {
                sync:' '            TableLog {
                held: None,
                sync:'
    test=crash ;;
  kafka-commit-twice) # recovery ignores the commit marker: committed batches again
    replace executor/src/sinks/two_phase.rs 'if marker.is_some_and(|m| b.seq <= m) {' \
      'if marker.is_some_and(|m| b.seq <= m) && b.seq == u64::MAX {'
    test=kafka_exactly_once ;;
  *) echo "unknown bug $bug" >&2; exit 2 ;;
esac
git diff --stat -- server executor storage
cargo build --bin weir
if cargo test -p weir-sql-tests --test "$test"; then
  echo "NOT CAUGHT: $bug passed --test $test" >&2
  status=1
else
  echo "caught: $bug made --test $test fail"
  status=0
fi
git checkout -- server executor storage
cargo build --bin weir >/dev/null 2>&1 || true
exit $status
