CREATE TABLE t (id INT PRIMARY KEY, g INT NOT NULL, v INT NOT NULL);
INSERT INTO t SELECT x, x % 100, 0 FROM generate_series(1, 100000) AS s(x);
CREATE MATERIALIZED VIEW v AS SELECT g, count(*) AS n, sum(v) AS total FROM t GROUP BY g;
-- The loaded rows' first checkpoint, before the clock starts (PostgreSQL's setup ends
-- with VACUUM ANALYZE likewise).
CHECKPOINT;
