-- q12: bids per bidder per 10 s of processing time (Nexmark's text; nothing to check:
-- which window a bid falls in depends on when it is processed)
CREATE TABLE nexmark_q12 (
  bidder BIGINT, bid_count BIGINT, starttime TIMESTAMP(3), endtime TIMESTAMP(3)
) WITH ('connector' = 'blackhole');

INSERT INTO nexmark_q12
SELECT B.bidder, count(*) AS bid_count,
       TUMBLE_START(B.p_time, INTERVAL '10' SECOND) AS starttime,
       TUMBLE_END(B.p_time, INTERVAL '10' SECOND) AS endtime
FROM (SELECT *, PROCTIME() AS p_time FROM bid) B
GROUP BY B.bidder, TUMBLE(B.p_time, INTERVAL '10' SECOND);
