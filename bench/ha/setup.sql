-- The HA cost benchmark (scripts/bench-ha.sh): one table written by INSERTs, with a
-- view over it, so that every acknowledged row also flows through the dataflow.
CREATE TABLE ins (client BIGINT, k BIGINT, v BIGINT);
CREATE MATERIALIZED VIEW ins_counts AS SELECT client, count(*) AS n FROM ins GROUP BY client;
