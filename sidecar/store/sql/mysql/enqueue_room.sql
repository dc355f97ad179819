-- enqueue_room: whether the provider's queue has room (max_depth NULL: always).
SELECT :max_depth IS NULL
       OR (SELECT COUNT(*) FROM (SELECT 1 FROM webhook_queue
                                  WHERE provider = :provider AND due_at IS NOT NULL
                                  LIMIT :depth_limit) AS pending) < :max_depth AS ok;
