-- A nonce's binding as rows.nonce_binding reads it.
body_sha256, received_at, {{now}} AS now
