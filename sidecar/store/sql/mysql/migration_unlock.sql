-- migration_unlock: the named lock given back.
SELECT RELEASE_LOCK(CONCAT('webhook-sidecar:migrate:', DATABASE())) AS released;
