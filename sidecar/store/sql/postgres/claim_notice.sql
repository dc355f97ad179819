-- Claim the right to send one notification: insert the (target, kind, provider) row, or move
-- its sent_at to now if the last message was claimed :interval_s seconds ago or more. A row
-- back: this caller sends. No row: a message went out within the interval (this process's or
-- another replica's). Concurrent claims of one key: one inserts; the others wait for its
-- commit on the unique index and then re-check the WHERE against the committed row (READ
-- COMMITTED), which is now: none of them wins. Not repeated after a lost connection (absent
-- from AGAIN): the caller counts the message failed rather than risk sending it twice.
INSERT INTO webhook_notice AS n (target, kind, provider, sent_at)
VALUES (:target::text, :kind::text, :provider::text, clock_timestamp())
ON CONFLICT (target, kind, provider) DO UPDATE
   SET sent_at = EXCLUDED.sent_at
 WHERE n.sent_at <= EXCLUDED.sent_at - make_interval(secs => :interval_s::float8)
RETURNING 1 AS claimed;
