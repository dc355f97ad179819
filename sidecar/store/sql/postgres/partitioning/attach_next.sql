-- Move :parent's DEFAULT partition's rows of [:lo, :hi) into :part_name and attach it
-- (functions.sql); false when another run made that range meanwhile.
SELECT webhook_partition_attach_next(:parent::text::regclass, :keycol::text, :part_name::text,
                                     :lo::timestamptz, :hi::timestamptz);
