\set id random(1, 100000)
UPDATE t SET v = v + 1 WHERE id = :id;
