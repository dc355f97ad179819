-- take_lock_row: on a Galera cluster, first in an ordered take's transaction, the provider's
-- lock row written: a concurrent take on this node waits for its row lock; one on another node
-- that writes it too fails certification and runs again (mysql/queue_writes.py).
INSERT INTO webhook_take_lock (provider, takes) VALUES (:provider, 1)
    ON DUPLICATE KEY UPDATE takes = takes + 1;
