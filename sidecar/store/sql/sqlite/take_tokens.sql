-- Take up to :want tokens from :provider's bucket (delivery.rate): the PostgreSQL file of the
-- same name says what and why. One statement: SQLite takes the write lock before it reads the
-- row, so concurrent takes (threads or processes sharing the file) run one after the other.
-- CAST(… AS INTEGER) rounds towards zero: the floor of a count that is never negative.
INSERT INTO webhook_rate (provider, tokens, refilled_at, taken)
SELECT :provider, :burst - min(:want, :burst), (julianday('now') - 2440587.5) * 86400.0,
       min(:want, :burst)
 WHERE true
ON CONFLICT (provider) DO UPDATE
   SET taken = min(:want, CAST(min(:burst * 1.0, tokens + max(0.0, excluded.refilled_at
                                                                  - refilled_at) * :per_second)
                               AS INTEGER)),
       tokens = min(:burst * 1.0, tokens + max(0.0, excluded.refilled_at - refilled_at)
                                           * :per_second)
              - min(:want, CAST(min(:burst * 1.0, tokens + max(0.0, excluded.refilled_at
                                                                    - refilled_at)
                                                              * :per_second)
                                AS INTEGER)),
       refilled_at = excluded.refilled_at
RETURNING taken, tokens;
