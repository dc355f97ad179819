-- take_tokens: refill from the clock, then take up to :want whole tokens. Each assignment
-- reads only columns not yet assigned (refilled_at last), so the order of evaluation is moot.
UPDATE webhook_rate
   SET taken = LEAST(:want, FLOOR(LEAST(:burst, tokens
                      + GREATEST(0, {{now}} - refilled_at) * :per_second))),
       tokens = LEAST(:burst, tokens + GREATEST(0, {{now}} - refilled_at) * :per_second)
              - LEAST(:want, FLOOR(LEAST(:burst, tokens
                      + GREATEST(0, {{now}} - refilled_at) * :per_second))),
       refilled_at = {{now}}
 WHERE provider = :provider;
