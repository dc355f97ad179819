-- Table :part (a name as a regclass prints it) in the catalog: its oid, its schema and name as
-- stored (the adapter quotes them itself for its DDL: partition_ddl.py), and whether it is a
-- partition. No row: gone.
SELECT c.oid, n.nspname AS schema, c.relname AS name, c.relispartition AS attached
  FROM pg_class AS c
  JOIN pg_namespace AS n ON n.oid = c.relnamespace
 WHERE c.oid = to_regclass(:part::text);
