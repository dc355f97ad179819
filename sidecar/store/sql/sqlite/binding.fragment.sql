-- The columns of a NonceBinding (sidecar/store/rows.py nonce_binding): the bound hash, when it
-- was first bound, and the database clock as `now`, times as Unix epoch seconds; spliced in
-- where a query says {{binding}}. The caller dates what it remembers by the age, now - received_at.
body_sha256, received_at, (julianday('now') - 2440587.5) * 86400.0 AS now
