-- galera_primary_keys: the tables of this database that have a primary key.
SELECT DISTINCT table_name AS table_name
  FROM information_schema.table_constraints
 WHERE constraint_schema = DATABASE() AND constraint_type = 'PRIMARY KEY';
