-- galera_tables: the store's tables with their engine and whether they have a primary key.
SELECT t.table_name AS table_name, t.engine AS engine,
       EXISTS (SELECT 1 FROM information_schema.table_constraints AS c
                WHERE c.table_schema = t.table_schema AND c.table_name = t.table_name
                  AND c.constraint_type = 'PRIMARY KEY') AS has_primary_key
  FROM information_schema.tables AS t
 WHERE t.table_schema = DATABASE() AND t.table_type = 'BASE TABLE'
   AND t.table_name LIKE 'webhook\_%';
