-- webhook-sidecar embedded schema (SQLite): notifications sent, one row per (target, kind,
-- provider), so that a condition is notified once per interval (notify.interval), whichever
-- process notices it. claim_notice.sql moves sent_at only when the last message is an interval
-- old, in one statement (SQLite takes the write lock before it reads). `target` is a digest of
-- the target's URL and format, never the URL (a Slack URL carries its token).
CREATE TABLE webhook_notice (
    target   TEXT NOT NULL,
    kind     TEXT NOT NULL,
    provider TEXT NOT NULL,
    sent_at  REAL NOT NULL,   -- seconds since the Unix epoch
    PRIMARY KEY (target, kind, provider)
) STRICT;
