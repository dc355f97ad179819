-- Did an earlier run of this very result write commit? Run by the adapter after a repeat of
-- complete.sql (the first run's connection failed; its update may have committed, its answer
-- lost) updated nothing. The fence makes the repeat write nothing either way; this read tells
-- "already recorded by the first run" (the row holds exactly this attempt's result, latency to
-- the bit) from "superseded" (another attempt took over, or an operator released the event).
SELECT attempt
  FROM webhook_event
 WHERE provider = :provider::text AND event_id = :event_id::text
   AND attempt = :attempt::integer AND state = :state::text
   AND outcome IS NOT DISTINCT FROM :outcome::text
   AND response_status IS NOT DISTINCT FROM :response_status::integer
   AND response_headers IS NOT DISTINCT FROM :response_headers::text::jsonb
   AND response_body IS NOT DISTINCT FROM :response_body::bytea
   AND latency_ms IS NOT DISTINCT FROM :latency_ms::float8;
