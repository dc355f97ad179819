-- claim_notice: the first notice of (target, kind, provider). ER_DUP_ENTRY (1062): one was
-- sent before (claim_notice_again.sql decides).
INSERT INTO webhook_notice (target, kind, provider, sent_at)
VALUES (:target, :kind, :provider, {{now}});
