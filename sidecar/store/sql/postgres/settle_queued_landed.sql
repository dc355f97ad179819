-- Did an earlier run of this very settle commit? Run by the adapter after a repeat of
-- settle_queued.sql (the first run's connection failed; its writes may have committed, its
-- answer lost) wrote nothing. The fence makes the repeat write nothing either way; this read
-- tells "written by the first run" from "superseded": the row holds exactly this try's state
-- and result (latency to the bit, as complete_landed.sql checks), its lease is cleared, and
-- its entry is gone ('done') or still at take :tries with this settle's error and no holder.
SELECT attempt
  FROM webhook_event AS e
 WHERE provider = :provider::text AND event_id = :event_id::text
   AND state = :state::text AND lease_owner IS NULL
   AND outcome IS NOT DISTINCT FROM :outcome::text
   AND response_status IS NOT DISTINCT FROM :response_status::integer
   AND response_headers IS NOT DISTINCT FROM :response_headers::text::jsonb
   AND response_body IS NOT DISTINCT FROM :response_body::bytea
   AND latency_ms IS NOT DISTINCT FROM :latency_ms::float8
   AND CASE WHEN :state::text = 'done'
            THEN NOT EXISTS (SELECT 1 FROM webhook_queue AS q
                              WHERE q.provider = e.provider AND q.event_id = e.event_id)
            ELSE EXISTS (SELECT 1 FROM webhook_queue AS q
                          WHERE q.provider = e.provider AND q.event_id = e.event_id
                            AND q.tries = :tries::integer AND q.lease_owner IS NULL
                            AND q.last_error IS NOT DISTINCT FROM :error::text)
       END;
