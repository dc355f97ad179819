-- migration_unlock: the migrate lease given back.
DELETE FROM webhook_sidecar_lock WHERE name = 'migrate' AND owner = :owner;
