-- enqueue_event: the queued event row at attempt 0. ER_DUP_ENTRY (1062): the key exists.
INSERT INTO webhook_event (
    provider, event_id, received_at, body_sha256, state, attempt,
    lease_owner, lease_until, updated_at, payload_body, payload_request
)
VALUES (:provider, :event_id, {{now}}, :body_sha256, 'queued', 0,
        NULL, NULL, {{now}}, :payload_body, :payload_request);
