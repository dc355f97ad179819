-- Take up to :want tokens from :provider's bucket (delivery.rate), in one autocommitted
-- statement: refill it for the seconds since it was last refilled, by the database clock, at
-- :per_second tokens a second, never above :burst; grant the whole tokens it then holds, up to
-- :want; keep the rest. A bucket seen for the first time starts full. Answers one row: `taken`
-- (granted, 0 when less than one token is there) and `tokens` (left after the take); the
-- caller works out from `tokens` when the next whole one is due (core.limits.next_token_in).
--
-- Races: concurrent takes of one provider (any process) meet at the bucket's row. An INSERT
-- whose row exists goes to DO UPDATE, which locks the row and reads its newest committed version
-- (waiting for a taker that has not committed yet), so the takes run one after the other, each
-- refilling from where the previous one left the bucket: between them they never get more than
-- the bucket held plus what the clock added. Two first takes insert one row: the second waits
-- for the first's commit and takes from the row it left.
--
-- A take that is granted nothing still writes the refill (tokens and refilled_at): the same
-- bucket, counted from now. Takes are few (one per worker take while limited, one per
-- forwarded delivery in forward mode), and the row stays one page.
WITH t AS (
    SELECT clock_timestamp() AS ts
)
INSERT INTO webhook_rate AS r (provider, tokens, refilled_at, taken)
SELECT :provider::text, :burst::integer - least(:want::integer, :burst::integer), t.ts,
       least(:want::integer, :burst::integer)
  FROM t
ON CONFLICT (provider) DO UPDATE
   SET taken = least(:want::integer, floor(least(
           :burst::integer::float8,
           r.tokens + greatest(0, extract(epoch FROM excluded.refilled_at - r.refilled_at))
                      * :per_second::float8)))::integer,
       tokens = least(
           :burst::integer::float8,
           r.tokens + greatest(0, extract(epoch FROM excluded.refilled_at - r.refilled_at))
                      * :per_second::float8)
         - least(:want::integer, floor(least(
           :burst::integer::float8,
           r.tokens + greatest(0, extract(epoch FROM excluded.refilled_at - r.refilled_at))
                      * :per_second::float8))),
       refilled_at = excluded.refilled_at
RETURNING r.taken, r.tokens;
