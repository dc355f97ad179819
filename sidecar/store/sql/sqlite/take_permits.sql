-- Take up to :want of :provider's :concurrency slots, leased to :owner for :lease_seconds: the
-- PostgreSQL file of the same name says what and why. One statement: SQLite takes the write
-- lock before it reads, so concurrent takers (threads or processes) run one after the other
-- and each sees the slots the previous one took; the DO UPDATE guard keeps a live lease all
-- the same.
WITH RECURSIVE s(slot) AS (
    SELECT 1 WHERE :concurrency >= 1
    UNION ALL
    SELECT slot + 1 FROM s WHERE slot < :concurrency
), clock(ts) AS (
    SELECT (julianday('now') - 2440587.5) * 86400.0
)
INSERT INTO webhook_permit (provider, slot, owner, lease_until)
SELECT :provider, s.slot, :owner, clock.ts + :lease_seconds
  FROM s, clock
 WHERE NOT EXISTS (SELECT 1
                     FROM webhook_permit AS p
                    WHERE p.provider = :provider AND p.slot = s.slot
                      AND p.lease_until > clock.ts)
 ORDER BY s.slot
 LIMIT :want
ON CONFLICT (provider, slot) DO UPDATE
   SET owner = excluded.owner,
       lease_until = excluded.lease_until
 WHERE lease_until <= excluded.lease_until - :lease_seconds
RETURNING slot;
