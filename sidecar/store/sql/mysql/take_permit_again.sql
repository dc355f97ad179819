-- take_permit_again: a slot whose lease has ended taken (1 row matched: taken).
UPDATE webhook_permit SET owner = :owner, lease_until = ROUND({{now}} + :lease_seconds, 6)
 WHERE provider = :provider AND slot = :slot AND lease_until <= {{now}};
