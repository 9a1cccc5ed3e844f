\set k random(1, 1000000000)
INSERT INTO ins VALUES (:client_id, :k, 1);
