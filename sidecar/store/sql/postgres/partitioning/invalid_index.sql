-- Index :index_name if an interrupted CREATE INDEX CONCURRENTLY left it invalid: its schema and
-- name as stored, for the DROP INDEX the adapter builds (partition_ddl.py). No row: valid or none.
SELECT n.nspname AS schema, c.relname AS name
  FROM pg_index AS i
  JOIN pg_class AS c ON c.oid = i.indexrelid
  JOIN pg_namespace AS n ON n.oid = c.relnamespace
 WHERE i.indexrelid = to_regclass(:index_name::text) AND NOT i.indisvalid;
