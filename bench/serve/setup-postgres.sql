-- PostgreSQL cannot keep v current incrementally: it is a materialized view refreshed
-- once, with a unique index on g. Its UPDATEs therefore maintain no view at all,
-- which favours PostgreSQL; its reads are index lookups like Weir's.
CREATE TABLE t (id INT PRIMARY KEY, g INT NOT NULL, v INT NOT NULL);
INSERT INTO t SELECT x, x % 100, 0 FROM generate_series(1, 100000) AS s(x);
CREATE MATERIALIZED VIEW v AS SELECT g, count(*) AS n, sum(v) AS total FROM t GROUP BY g;
CREATE UNIQUE INDEX v_g ON v (g);
VACUUM ANALYZE;
