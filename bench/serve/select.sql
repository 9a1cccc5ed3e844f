\set g random(0, 99)
SELECT n, total FROM v WHERE g = :g;
