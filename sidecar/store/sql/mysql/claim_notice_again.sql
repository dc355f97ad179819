-- claim_notice_again: the next notice, once the last is an interval old (1 row matched).
UPDATE webhook_notice SET sent_at = {{now}}
 WHERE target = :target AND kind = :kind AND provider = :provider
   AND sent_at <= {{now}} - :interval_s;
