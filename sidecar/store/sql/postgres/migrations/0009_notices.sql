-- webhook-sidecar: notifications sent, one row per (target, kind, provider), so that a
-- condition several replicas notice at once is notified once per interval (notify.interval).
--
-- claim_notice.sql inserts the row, or moves its sent_at to now only when the last message is
-- an interval old: one guarded statement, so of the replicas noticing one condition exactly
-- one wins and sends. A table of its own: nothing on the delivery path reads or writes it.
-- `target` is a digest of the target's URL and format, never the URL (a Slack URL carries its
-- token).

SET LOCAL lock_timeout = '10s';

CREATE TABLE webhook_notice (
    target   text        NOT NULL,
    kind     text        NOT NULL,   -- NoticeKind: breaker.opened, dead_letters.threshold, …
    provider text        NOT NULL,
    sent_at  timestamptz NOT NULL,   -- when the last message was claimed for sending
    PRIMARY KEY (target, kind, provider)
);

COMMENT ON TABLE webhook_notice IS
    'webhook-sidecar: the last notification claimed per target, kind and provider';
