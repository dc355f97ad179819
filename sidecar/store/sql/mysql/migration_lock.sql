-- migration_lock: the server-wide named lock concurrent `migrate` runs queue on (1: held).
SELECT GET_LOCK(CONCAT('webhook-sidecar:migrate:', DATABASE()), :wait) AS locked;
