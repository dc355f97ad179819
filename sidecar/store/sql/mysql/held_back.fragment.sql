-- Queue mode's ordering rule (sql/shared/held_back.fragment.sql, with the statement's clock
-- {{now}}, constant within a statement, for the other dialects' CTE t: MySQL's locking reads
-- take no CTE): true while entry q is held back by its order key, because another entry of
-- the same key is waiting or in flight and was accepted earlier (seq), or is in flight under
-- a live lease.
EXISTS (
    SELECT 1
      FROM webhook_queue AS p
     WHERE q.order_key IS NOT NULL
       AND p.provider = q.provider AND p.order_key = q.order_key
       AND p.event_id <> q.event_id
       AND p.due_at IS NOT NULL
       AND (p.seq < q.seq
            OR (p.lease_owner IS NOT NULL AND p.tries > 0
                AND p.due_at > {{now}})))
