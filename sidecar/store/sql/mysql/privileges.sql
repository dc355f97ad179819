-- privileges: the privileges the current user holds on this database (or on every one).
-- Aliased: MySQL 8 names information_schema's columns in capitals.
SELECT privilege_type AS privilege_type FROM information_schema.schema_privileges
 WHERE table_schema = DATABASE()
   AND grantee = CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''',
                        SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''')
UNION
SELECT privilege_type AS privilege_type FROM information_schema.user_privileges
 WHERE grantee = CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''',
                        SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''');
