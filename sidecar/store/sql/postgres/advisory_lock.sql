-- Take the transaction-level advisory lock named :lock_name (released at commit or rollback):
-- the statements after it in the transaction run one caller at a time per name, each seeing
-- what the previous caller committed. Serialises the takes of a queue with an order key.
SELECT pg_advisory_xact_lock(hashtextextended(:lock_name::text, 0));
