-- Take up to :want of :provider's :concurrency slots (delivery.concurrency), each leased to
-- :owner (unique to the call) until the database clock's now + :lease_seconds, in one
-- autocommitted statement at READ COMMITTED. Answers one row per slot taken (`slot`); none
-- when every slot is held by a live lease.
--
-- A slot is free when it has no row or its row's lease has ended: a holder that died (SIGKILL,
-- a lost node) holds it no longer than its lease, and nothing has to clean up after it. A
-- release deletes the row (release_permits.sql).
--
-- The race: two takers (any processes) may both read slot s as free in their snapshots and
-- both try to write it. The primary key (provider, slot) orders them. The first inserts, or
-- updates the ended lease; the second's INSERT meets the key, waits for the first to commit,
-- and then goes to DO UPDATE on the newest committed version, whose WHERE it re-checks: the
-- lease is now live, so the second writes nothing for s and does not answer it. So a slot is
-- held by at most one live lease, and the live permits of a provider never exceed
-- :concurrency, however many takers run at once. What a taker loses in the race is only a
-- smaller answer (it asks again later), never a permit held twice. Slots are tried lowest
-- first, so takers meet on the same rows rather than scatter.
--
-- The update's guard is on the row's own lease against this statement's clock: the lease it
-- would write minus :lease_seconds is `now`, and a lease ending exactly now counts as ended
-- (as EventRow.lease_live has it).
WITH t AS MATERIALIZED (
    SELECT clock_timestamp() AS ts
), free AS (
    SELECT s.slot
      FROM generate_series(1, :concurrency::integer) AS s(slot)
     WHERE NOT EXISTS (SELECT 1
                         FROM webhook_permit AS p
                        WHERE p.provider = :provider::text AND p.slot = s.slot
                          AND p.lease_until > (SELECT ts FROM t))
     ORDER BY s.slot
     LIMIT :want::integer
)
INSERT INTO webhook_permit AS p (provider, slot, owner, lease_until)
SELECT :provider::text, free.slot, :owner::text,
       t.ts + make_interval(secs => :lease_seconds::float8)
  FROM free, t
ON CONFLICT (provider, slot) DO UPDATE
   SET owner = excluded.owner,
       lease_until = excluded.lease_until
 WHERE p.lease_until <= excluded.lease_until - make_interval(secs => :lease_seconds::float8)
RETURNING p.slot;
