-- The guard's binding as a guarded claim answers it (sidecar/store/rows.py guard_binding), from
-- `g`, the webhook_nonce row as the statement bound or found it (columns guard_sha256 and
-- guard_received_at), times as Unix epoch seconds with the database clock as guard_now; all NULL
-- but guard_now when the claim carried no guard or did not settle it. Spliced in where a query
-- says {{guard}}.
g.guard_sha256,
extract(epoch FROM g.guard_received_at)::float8 AS guard_received_at,
extract(epoch FROM clock_timestamp())::float8 AS guard_now
