-- Queue mode's ordering rule, one text for every dialect (take_queued.sql, SQLite's and MySQL's
-- take_queued_pick.sql): true while entry q is held back by its order key, because another entry
-- of the same key is waiting or in flight and was accepted earlier (seq), or is in flight under a
-- live lease. A dead entry (due_at NULL) holds nothing back. The query names the entry q; the
-- clock is clock.fragment.sql's. Spliced in where a query says {{held_back}}.
EXISTS (
    SELECT 1
      FROM webhook_queue AS p
     WHERE q.order_key IS NOT NULL
       AND p.provider = q.provider AND p.order_key = q.order_key
       AND p.event_id <> q.event_id
       AND p.due_at IS NOT NULL
       AND (p.seq < q.seq
            OR (p.lease_owner IS NOT NULL AND p.tries > 0
                AND p.due_at > {{clock}})))
