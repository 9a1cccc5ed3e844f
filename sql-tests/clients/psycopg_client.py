"""psycopg 3 against Weir: prepared statements past prepare_threshold (and their
DEALLOCATE), pipeline mode, COPY in both directions, type adaptation, close().

Usage: psycopg_client.py PORT. Prints one JSON object with what it saw; the Rust test
(sql-tests/tests/psycopg.rs) asserts on it. Any exception fails the run (exit 1)."""

import datetime
import decimal
import json
import sys

import psycopg

port = int(sys.argv[1])
out = {}
conn = psycopg.connect(f"host=127.0.0.1 port={port} user=weir dbname=weir", autocommit=True)
conn.execute(
    "CREATE TABLE py (id int PRIMARY KEY, name text, price numeric(8,2), ok boolean, "
    "d date, at timestamp, score double precision)"
)

# Prepared statements: psycopg prepares a query after prepare_threshold (5) runs.
for i in range(20):
    conn.execute(
        "INSERT INTO py (id, name, price, ok, d, at, score) VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (i, f"n{i}", decimal.Decimal("1.25") * i, i % 2 == 0, datetime.date(2024, 1, 1 + i % 28),
         datetime.datetime(2024, 1, 1, 12, 0, i), i / 4),
    )
counts = [conn.execute("SELECT count(*) FROM py WHERE id >= %s", (k,)).fetchone()[0] for k in range(10)]
out["counts"] = counts

# Forcing psycopg to deallocate: a tiny prepared-statement cache evicts with DEALLOCATE.
conn.prepared_max = 1
for k in range(8):
    conn.execute("SELECT name FROM py WHERE id = %s", (k,)).fetchone()
    conn.execute("SELECT price FROM py WHERE id = %s", (k,)).fetchone()
conn.execute("DEALLOCATE ALL")
out["after_deallocate"] = conn.execute("SELECT count(*) FROM py").fetchone()[0]

# Types as Python values.
row = conn.execute("SELECT id, name, price, ok, d, at, score FROM py WHERE id = 3").fetchone()
out["types"] = [type(v).__name__ for v in row]
out["row"] = [str(v) for v in row]

# Pipeline mode: many statements before one Sync, results read afterwards.
with conn.pipeline():
    curs = []
    for i in range(100, 150):
        conn.execute("INSERT INTO py (id, name) VALUES (%s, %s)", (i, f"p{i}"))
    for i in range(100, 105):
        c = conn.cursor()
        c.execute("SELECT name FROM py WHERE id = %s", (i,))
        curs.append(c)
out["pipeline_reads"] = [c.fetchone()[0] for c in curs]
out["pipeline_count"] = conn.execute("SELECT count(*) FROM py WHERE id >= 100").fetchone()[0]

# COPY FROM STDIN with write_row, and COPY TO STDOUT read back.
with conn.cursor() as cur:
    with cur.copy("COPY py (id, name, price) FROM STDIN") as copy:
        for i in range(200, 300):
            copy.write_row((i, f"c\t{i}", decimal.Decimal(i) / 100))
    out["copy_rowcount"] = cur.rowcount
    with cur.copy("COPY (SELECT id, name FROM py WHERE id >= 200 ORDER BY id) TO STDOUT") as copy:
        rows = list(copy.rows())
    out["copy_out_first"] = list(rows[0])
    out["copy_out_count"] = len(rows)
    try:
        with cur.copy("COPY py (id, name) FROM STDIN") as copy:
            copy.write_row((300, "fine"))
            copy.write_row(("not a number", "bad"))
        out["bad_copy"] = "accepted"
    except psycopg.Error as e:
        out["bad_copy"] = e.sqlstate
out["after_bad_copy"] = conn.execute("SELECT count(*) FROM py WHERE id >= 300").fetchone()[0]

# A transaction block (psycopg's default, non-autocommit) and close().
tx = psycopg.connect(f"host=127.0.0.1 port={port} user=weir dbname=weir")
with tx.cursor() as cur:
    cur.execute("INSERT INTO py (id, name) VALUES (1000, 'tx')")
tx.commit()
tx.close()
out["closed"] = tx.closed
# Another session's write is visible at the next barrier; FLUSH makes it visible now.
conn.execute("FLUSH")
out["tx_row"] = conn.execute("SELECT name FROM py WHERE id = 1000").fetchone()[0]
conn.close()
print(json.dumps(out))
