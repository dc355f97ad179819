-- galera_tables: the store's tables with their engine. (Flat queries of information_schema:
-- MariaDB 10.11 was seen to crash on one nested in an EXISTS subquery under load.)
SELECT table_name AS table_name, engine AS engine
  FROM information_schema.tables
 WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE'
   AND table_name LIKE 'webhook\_%';
