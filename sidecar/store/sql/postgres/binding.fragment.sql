-- The columns of a NonceBinding (sidecar/store/rows.py nonce_binding): the bound hash, when it
-- was first bound, and the database clock as `now`, times as Unix epoch seconds; spliced in
-- where a query says {{binding}}. The caller dates what it remembers by the age, now - received_at.
body_sha256,
extract(epoch FROM received_at)::float8 AS received_at,
extract(epoch FROM clock_timestamp())::float8 AS now
