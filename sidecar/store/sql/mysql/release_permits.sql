-- release_permits: the slots given back (only those this owner holds).
DELETE FROM webhook_permit
 WHERE provider = :provider AND owner = :owner
   AND slot IN (SELECT s.slot FROM JSON_TABLE(:slots, '$[*]' COLUMNS (slot INT PATH '$')) AS s);
