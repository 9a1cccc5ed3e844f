-- q10: every bid with its day and minute (nexmark writes it to a partitioned filesystem sink)
CREATE TABLE nexmark_q10 (
  auction BIGINT, bidder BIGINT, price BIGINT, `dateTime` TIMESTAMP(3), extra VARCHAR,
  dt VARCHAR, hm VARCHAR
) WITH ('connector' = 'blackhole');

INSERT INTO nexmark_q10
SELECT auction, bidder, price, `dateTime`, extra,
       DATE_FORMAT(`dateTime`, 'yyyy-MM-dd'), DATE_FORMAT(`dateTime`, 'HH:mm')
FROM bid;
