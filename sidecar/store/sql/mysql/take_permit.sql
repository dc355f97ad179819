-- take_permit: one slot, never held before, taken. ER_DUP_ENTRY (1062): it exists
-- (take_permit_again.sql takes it if its lease has ended).
INSERT INTO webhook_permit (provider, slot, owner, lease_until)
VALUES (:provider, :slot, :owner, ROUND({{now}} + :lease_seconds, 6));
