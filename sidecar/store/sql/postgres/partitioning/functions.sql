-- webhook-sidecar partitioning: the functions a partitioned store runs in the database
-- (store.partitioning; docs/design.md, "Where the logic lives"). Installed, and re-installed
-- by every newer release, with CREATE OR REPLACE by `migrate` and `store partition`; a
-- database that was never partitioned has none of them. Retention's decisions are Python's
-- (core/partition_retention.py); only what must run inside the database is here, each for
-- one reason:
-- - the uniqueness triggers: they run on every insert, whoever inserts;
-- - webhook_partition_detach and webhook_partition_attach_next: no client round trip under a
--   lock that deliveries queue behind (the parent's, the DEFAULT partition's);
-- - the switch and the partitions it makes ahead (webhook_partition_switch_all and what it
--   calls): one transaction holding all four tables, which every delivery waits for;
-- - the looks and catalog reads those call (webhook_partition_busy, webhook_partitions, …);
-- - reads with no decision in them that name a table at run time (the providers of a
--   partition, the rows of a DEFAULT partition) or parse the detach's comments.
--
-- Partitioned tables and their partition key:
--   webhook_event   received_at   unique on (provider, event_id) by webhook_event_unique()
--   webhook_nonce   received_at   unique on (provider, nonce)    by webhook_nonce_unique()
--   webhook_attempt finished_at   (never unique)
-- webhook_queue is small (waiting, in-flight and dead entries only) and stays one table; it
-- loses its foreign key to webhook_event, which no partitioned table can be the target of
-- (purge.sql and the partition drop delete dead entries themselves).

-- Uniqueness across partitions. A unique index on a partitioned table must contain the
-- partition key, so none can say "(provider, event_id) once". This BEFORE INSERT trigger does:
-- it takes a transaction-level advisory lock on the key (held to commit, so a concurrent copy
-- waits here until the first one's row is committed or rolled back) and then looks for the key
-- in every partition. The function is VOLATILE: at READ COMMITTED each of its queries takes a
-- new snapshot, so the second copy sees the first copy's commit after its wait, and rows an
-- earlier item of the same statement inserted (PostgreSQL, "Visibility of Data Changes"). A
-- key that exists skips the row (RETURN NULL): the INSERT returns no row, which claim.sql,
-- claim_batch.sql and enqueue.sql already answer by reading the row with a new statement.
-- Batches insert their keys in sorted order, so two batches take the locks in one order and
-- cannot deadlock. The hash is 64 bits; two keys sharing one only wait for each other.
-- Only READ COMMITTED gives that new snapshot: at REPEATABLE READ or SERIALIZABLE the
-- statement's snapshot predates the wait, the first copy's row stays invisible and a second
-- row would go in. So any other level is refused (SQLSTATE WS001), never doubled; the store
-- runs its inserts at READ COMMITTED whatever the role's default (store/postgres/again.py).
CREATE OR REPLACE FUNCTION webhook_event_unique() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'inserts into webhook_event must run at READ COMMITTED, not %',
            upper(current_setting('transaction_isolation'))
            USING ERRCODE = 'WS001';
    END IF;
    PERFORM pg_advisory_xact_lock(
        hashtextextended('webhook_event' || chr(31) || NEW.provider || chr(31) || NEW.event_id, 0));
    IF EXISTS (SELECT 1 FROM webhook_event
                WHERE provider = NEW.provider AND event_id = NEW.event_id) THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END
$$;

-- The same for nonces (bind_nonce.sql, bind_nonce_batch.sql): as many rows as events for the
-- providers that guard their bodies against replay, so partitioned alike. A copy, not one
-- function taking the table and key column as trigger arguments: that would be dynamic SQL
-- (EXECUTE), planned again on every insert of every delivery.
CREATE OR REPLACE FUNCTION webhook_nonce_unique() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'inserts into webhook_nonce must run at READ COMMITTED, not %',
            upper(current_setting('transaction_isolation'))
            USING ERRCODE = 'WS001';
    END IF;
    PERFORM pg_advisory_xact_lock(
        hashtextextended('webhook_nonce' || chr(31) || NEW.provider || chr(31) || NEW.nonce, 0));
    IF EXISTS (SELECT 1 FROM webhook_nonce
                WHERE provider = NEW.provider AND nonce = NEW.nonce) THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END
$$;

-- The partitions of a partitioned table with their bounds (NULL: MINVALUE, or the DEFAULT
-- partition's none), read from the catalog: no bookkeeping of our own to disagree with it.
-- A partition whose DETACH CONCURRENTLY was interrupted is listed with pending = true.
CREATE OR REPLACE FUNCTION webhook_partitions(parent regclass)
RETURNS TABLE (part regclass, lower_bound timestamptz, upper_bound timestamptz,
               is_default boolean, pending boolean)
LANGUAGE sql STABLE AS $$
    SELECT i.inhrelid::regclass,
           CASE WHEN b.m[1] <> 'MINVALUE' THEN trim(both '''' from b.m[1])::timestamptz END,
           trim(both '''' from b.m[2])::timestamptz,
           e.bound = 'DEFAULT',
           i.inhdetachpending
      FROM pg_inherits AS i
      JOIN pg_class AS c ON c.oid = i.inhrelid
     CROSS JOIN LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS bound) AS e
     CROSS JOIN LATERAL (
           SELECT regexp_match(e.bound, '^FOR VALUES FROM \((.*)\) TO \((.*)\)$') AS m) AS b
     WHERE i.inhparent = parent
$$;

-- Making the next partition of `parent`, from its last upper bound (or from the start of the
-- current interval), if it starts no more than `ahead` intervals from now. Bounds are
-- multiples of the interval since the Unix epoch (a day: midnight UTC). In two steps, each a
-- short transaction of the caller's (docs/design.md, "Partitioned retention"):
--
-- 1. webhook_partition_prepare_next: the partition as a table of its own, empty, with the
--    parent's indexes and a validated CHECK of its bounds (instant on an empty table). No
--    lock any delivery waits for: no proxy reaches the table yet.
-- 2. webhook_partition_attach_next: rows that went to the DEFAULT partition meanwhile
--    (maintenance was down past the last partition) are moved into it, then it is attached.
--    For a range deliveries may still insert into, the DEFAULT partition is locked first, so
--    that no row of the range enters it between the move and the attach (which would refuse
--    the attach, 23514, for as long as deliveries of that range flow). ACCESS EXCLUSIVE, the
--    attach's own lock, at once: a weaker lock raised to it later deadlocks with an insert
--    that has read the DEFAULT partition and waits to write to it. The attach then checks
--    the DEFAULT partition's rows (a scan: no constraint of its can prove the range empty)
--    and does catalog work: the CHECK spares it the new table's scan, the indexes their
--    build. Every insert reads the DEFAULT partition (the uniqueness look), so an insert
--    waits at most the caller's lock_timeout plus the move of that range's rows and that
--    scan (which the caller's statement_timeout bounds). A past range gets no new rows, so
--    its move takes no lock first (a very late row makes the attach refuse: tried again).
--    The move is one transaction, not batches: a row moved by a committed batch would sit in
--    a table no uniqueness look reaches until the attach, and a redelivery of its event would
--    be claimed as new.
--    CREATE TABLE … PARTITION OF would lock the parent ACCESS EXCLUSIVE (every delivery
--    waits); ATTACH takes SHARE UPDATE EXCLUSIVE on it.
-- One caller at a time (an advisory lock), so replicas running maintenance together make each
-- partition once.
CREATE OR REPLACE FUNCTION webhook_partition_prepare_next(parent regclass, keycol text,
                                                          step_seconds integer, ahead integer)
RETURNS TABLE (part_name text, lo timestamptz, hi timestamptz)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    horizon timestamptz := clock_timestamp() + make_interval(secs => step_seconds * ahead);
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('webhook-sidecar:partitions', 0));
    SELECT max(p.upper_bound) INTO lo FROM webhook_partitions(parent) AS p WHERE NOT p.is_default;
    IF lo IS NULL THEN
        lo := to_timestamp(floor(extract(epoch FROM clock_timestamp()) / step_seconds)
                           * step_seconds);
    END IF;
    IF lo > horizon THEN
        RETURN;
    END IF;
    hi := lo + make_interval(secs => step_seconds);
    part_name := parent::text || '_p' || to_char(lo AT TIME ZONE 'UTC', 'YYYYMMDD"_"HH24MISS');
    IF to_regclass(part_name) IS NULL THEN
        EXECUTE format('CREATE TABLE %I (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS '
                       'INCLUDING GENERATED INCLUDING STORAGE INCLUDING INDEXES)',
                       part_name, parent);
        IF parent = 'webhook_event'::regclass THEN  -- HOT updates (0001_init.sql)
            EXECUTE format('ALTER TABLE %I SET (fillfactor = 80)', part_name);
        END IF;
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (%I >= %L AND %I < %L)',
                       part_name, part_name || '_bound', keycol, lo, keycol, hi);
    END IF;
    RETURN NEXT;
END
$$;

-- Step 2 (above): answers whether it attached `part_name`; false when another run made the
-- range meanwhile.
CREATE OR REPLACE FUNCTION webhook_partition_attach_next(parent regclass, keycol text,
                                                         part_name text, lo timestamptz,
                                                         hi timestamptz)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    default_part regclass;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('webhook-sidecar:partitions', 0));
    IF to_regclass(part_name) IS NULL
       OR (SELECT c.relispartition FROM pg_class AS c WHERE c.oid = to_regclass(part_name))
       OR coalesce((SELECT max(p.upper_bound) FROM webhook_partitions(parent) AS p
                     WHERE NOT p.is_default), lo) <> lo THEN
        RETURN false;
    END IF;
    SELECT p.part INTO default_part FROM webhook_partitions(parent) AS p WHERE p.is_default;
    IF default_part IS NOT NULL THEN
        IF hi > clock_timestamp() - interval '1 minute' THEN
            -- A range deliveries may still insert into (received_at: the transaction's start;
            -- the minute is ample for any store call): its writes wait. A past range gets no
            -- new rows; should a very late one come in, the attach refuses, and is tried again.
            EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', default_part);
        END IF;
        EXECUTE format('WITH moved AS (DELETE FROM %s WHERE %I >= $1 AND %I < $2 '
                       'RETURNING *) INSERT INTO %I SELECT * FROM moved',
                       default_part, keycol, keycol, part_name) USING lo, hi;
    END IF;
    EXECUTE format('ALTER TABLE %s ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                   parent, part_name, lo, hi);
    EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', part_name, part_name || '_bound');
    RETURN true;
END
$$;

-- Both steps in the caller's transaction (the switch: it holds the tables already); answers
-- whether a partition was made.
CREATE OR REPLACE FUNCTION webhook_partition_next(parent regclass, keycol text,
                                                  step_seconds integer, ahead integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    n record;
BEGIN
    SELECT * INTO n FROM webhook_partition_prepare_next(parent, keycol, step_seconds, ahead);
    IF n.part_name IS NULL THEN
        RETURN false;
    END IF;
    RETURN webhook_partition_attach_next(parent, keycol, n.part_name, n.lo, n.hi);
END
$$;

-- Every partition of `parent` up to `ahead` intervals from now, in the caller's transaction
-- (the switch: it holds the tables already); answers how many were made.
CREATE OR REPLACE FUNCTION webhook_partitions_ahead(parent regclass, keycol text,
                                                    step_seconds integer, ahead integer)
RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    made integer := 0;
BEGIN
    WHILE webhook_partition_next(parent, keycol, step_seconds, ahead) LOOP
        made := made + 1;
    END LOOP;
    RETURN made;
END
$$;

-- Whether any row of `part` (an event or attempt partition: both are keyed by provider and
-- event_id) belongs to an event with a queue entry waiting or in flight: index probes from the
-- small queue table, cheap enough to run under the detach's lock. With `detached_from` (an
-- event partition detached from it), an entry whose key is in that parent belongs to a newer
-- copy of the event, claimed as new after the detach: it does not keep the old row.
-- (A release before `detached_from` had one-argument versions: replaced, not overloaded.)
DROP FUNCTION IF EXISTS webhook_partition_busy(regclass);
DROP FUNCTION IF EXISTS webhook_partition_queued(regclass);
CREATE OR REPLACE FUNCTION webhook_partition_queued(part regclass,
                                                    detached_from regclass DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    queued boolean;
BEGIN
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM webhook_queue AS q JOIN %s AS r '
                   'ON r.provider = q.provider AND r.event_id = q.event_id '
                   'WHERE q.due_at IS NOT NULL%s)', part,
                   CASE WHEN detached_from IS NULL THEN '' ELSE format(
                       ' AND NOT EXISTS (SELECT 1 FROM %s AS a WHERE a.provider = q.provider '
                       'AND a.event_id = q.event_id)', detached_from) END) INTO queued;
    RETURN queued;
END
$$;

-- Whether an event partition holds an event still to be delivered: a live lease (an attempt
-- in flight), or a queue entry waiting or in flight (`detached_from`: as above). Such a
-- partition is never dropped.
CREATE OR REPLACE FUNCTION webhook_partition_busy(part regclass,
                                                  detached_from regclass DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    leased boolean;
BEGIN
    EXECUTE format(
        'SELECT EXISTS (SELECT 1 FROM %s AS e WHERE e.state = ''queued'' '
        '                  OR (e.state = ''processing'' AND e.lease_until > clock_timestamp()))',
        part) INTO leased;
    RETURN leased OR webhook_partition_queued(part, detached_from);
END
$$;

-- The providers that have rows in a partition, by a walk of its (provider, …) index: one probe
-- per provider, not a scan of the partition.
CREATE OR REPLACE FUNCTION webhook_partition_providers(part regclass) RETURNS text[]
LANGUAGE plpgsql STABLE AS $$
DECLARE
    found text[];
BEGIN
    -- The caller resolved the name before this call; another process's retention may have
    -- dropped the table since, and the regclass of a dropped table prints as its bare OID (a
    -- real name never does: it would be quoted). Gone reads as a failed lookup, as it does
    -- when the drop lands after this check (the EXECUTE looks the name up again).
    IF part::text ~ '^[0-9]+$' THEN
        RAISE EXCEPTION 'relation % does not exist', part USING ERRCODE = 'undefined_table';
    END IF;
    EXECUTE format(
        'WITH RECURSIVE p(provider) AS ('
        '    (SELECT provider FROM %1$s ORDER BY provider LIMIT 1)'
        '  UNION ALL'
        '    SELECT (SELECT provider FROM %1$s WHERE provider > p.provider'
        '             ORDER BY provider LIMIT 1) FROM p WHERE p.provider IS NOT NULL)'
        'SELECT coalesce(array_agg(provider), ''{}'') FROM p WHERE provider IS NOT NULL',
        part) INTO found;
    RETURN found;
END
$$;

-- The switch of one table to a partitioned one (`store partition`, `migrate` on a new
-- database), run in the one short transaction that holds the tables ACCESS EXCLUSIVE (the
-- caller took the locks). Only catalog changes here, no scan: the old table `tbl` becomes
-- `tbl`_before (its indexes renamed alike); a partitioned `tbl` is made like it (same
-- columns, defaults and checks), with its indexes and, for a keyed table, its uniqueness
-- trigger; the old table is attached as the partition of everything before `bound`. The
-- attach skips its scan because the old table has a validated CHECK (keycol < bound), the
-- constraint `tbl`_partition_bound added and validated beforehand; the parent's indexes
-- find theirs on the old table, built CONCURRENTLY beforehand. An empty old table (a new
-- database) is dropped instead. A DEFAULT partition takes rows past the last partition.
CREATE OR REPLACE FUNCTION webhook_partition_switch(tbl text, keycol text, bound timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    old text := tbl || '_before';
    idx record;
    empty boolean;
BEGIN
    EXECUTE format('ALTER TABLE %I RENAME TO %I', tbl, old);
    FOR idx IN SELECT c.relname
                 FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid
                WHERE i.indrelid = old::regclass AND c.relname LIKE tbl || '%'
    LOOP  -- renames a constraint's index with its constraint (webhook_event_pkey)
        EXECUTE format('ALTER INDEX %I RENAME TO %I', idx.relname,
                       old || substr(idx.relname, length(tbl) + 1));
    END LOOP;
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS '
                   'INCLUDING GENERATED INCLUDING STORAGE INCLUDING COMMENTS) '
                   'PARTITION BY RANGE (%I)', tbl, old, keycol);
    EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', tbl, tbl || '_partition_bound');
    IF tbl = 'webhook_event' THEN
        CREATE INDEX webhook_event_key_idx ON webhook_event (provider, event_id);
        CREATE INDEX webhook_event_received_at_idx ON webhook_event (provider, received_at);
        CREATE TRIGGER webhook_event_unique BEFORE INSERT ON webhook_event
            FOR EACH ROW EXECUTE FUNCTION webhook_event_unique();
    ELSIF tbl = 'webhook_nonce' THEN
        CREATE INDEX webhook_nonce_key_idx ON webhook_nonce (provider, nonce);
        CREATE INDEX webhook_nonce_received_at_idx ON webhook_nonce (provider, received_at);
        CREATE TRIGGER webhook_nonce_unique BEFORE INSERT ON webhook_nonce
            FOR EACH ROW EXECUTE FUNCTION webhook_nonce_unique();
    ELSIF tbl = 'webhook_attempt' THEN
        CREATE INDEX webhook_attempt_event_idx
            ON webhook_attempt (provider, event_id, finished_at);
    ELSE
        RAISE EXCEPTION 'webhook_partition_switch: no partitioned shape for table %', tbl;
    END IF;
    EXECUTE format('SELECT NOT EXISTS (SELECT 1 FROM %I)', old) INTO empty;
    IF empty THEN
        EXECUTE format('DROP TABLE %I', old);
    ELSE
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (MINVALUE) TO (%L)',
                       tbl, old, bound);
    END IF;
    EXECUTE format('CREATE TABLE %I PARTITION OF %I DEFAULT', tbl || '_default', tbl);
    IF tbl = 'webhook_event' THEN  -- HOT updates (0001_init.sql)
        ALTER TABLE webhook_event_default SET (fillfactor = 80);
    END IF;
END
$$;

-- The switch of the three tables, in the caller's one short transaction (its lock_timeout
-- bounds each wait): the locks first, in one order, then the queue's foreign key goes (no
-- partitioned table can be the target of one), then each table, then the partitions from
-- `bound` (or, on a new database, from the current interval) to `ahead` intervals on.
-- Refuses a `bound` less than a minute ahead: rows would be refused by the CHECK before long.
CREATE OR REPLACE FUNCTION webhook_partition_switch_all(bound timestamptz,
                                                        step_seconds integer, ahead integer)
RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF bound < clock_timestamp() + interval '1 minute' THEN
        RAISE EXCEPTION 'partition bound % is too close; prepare again', bound
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    LOCK TABLE webhook_event, webhook_queue, webhook_attempt, webhook_nonce
        IN ACCESS EXCLUSIVE MODE;
    ALTER TABLE webhook_queue DROP CONSTRAINT IF EXISTS webhook_queue_event_fkey;
    PERFORM webhook_partition_switch('webhook_event', 'received_at', bound);
    PERFORM webhook_partition_switch('webhook_attempt', 'finished_at', bound);
    PERFORM webhook_partition_switch('webhook_nonce', 'received_at', bound);
    PERFORM webhook_partitions_ahead('webhook_event', 'received_at', step_seconds, ahead);
    PERFORM webhook_partitions_ahead('webhook_attempt', 'finished_at', step_seconds, ahead);
    PERFORM webhook_partitions_ahead('webhook_nonce', 'received_at', step_seconds, ahead);
END
$$;

-- Rows in the DEFAULT partition of `parent`: inserts past the last partition (maintenance was
-- down longer than `ahead` intervals). Counted and logged; webhook_partition_attach_next
-- moves them.
CREATE OR REPLACE FUNCTION webhook_partition_default_rows(parent regclass) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
DECLARE
    part regclass;
    n bigint := 0;
BEGIN
    SELECT p.part INTO part FROM webhook_partitions(parent) AS p WHERE p.is_default;
    IF part IS NOT NULL THEN
        EXECUTE format('SELECT count(*) FROM %s', part) INTO n;
    END IF;
    RETURN n;
END
$$;

-- The advisory lock that keeps take-overs (take_over.sql, shared) out of retention's look at a
-- partition and its detach (exclusive): a row past retention that is failed, or processing
-- with an expired lease, can still be taken over by a very late redelivery; taken between the
-- look and the detach, its attempt would go on in a partition no proxy reaches any more, and
-- a second copy would be claimed as new beside it. The key is written out in take_over.sql.
CREATE OR REPLACE FUNCTION webhook_partition_retire_lock() RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT hashtextextended('webhook_partition_retire', 0) $$;

-- Detach `part` from `parent` unless it holds work, in the caller's transaction; answers
-- whether it was detached (NULL: it is no partition of `parent` any more). First, holding
-- the retention lock (above; its wait bounded by the caller's lock_timeout, take-overs wait
-- for it at most ~100 ms and answer "in flight"), the
-- look at an event partition's work (webhook_partition_busy): a scan of an old partition, with
-- no lock deliveries wait for. No lease can be taken in it after this look: new leases come
-- only from take-overs, held off, and from queue takes, which need a waiting queue entry.
-- Then the detach: a catalog change under the parent's ACCESS EXCLUSIVE lock (bounded by the
-- caller's lock_timeout, 100 ms; deliveries queue behind the wait), and, under that lock, a
-- look for a queue entry waiting or in flight (one re-driven since the scan) that rolls it all
-- back (object_in_use). Not CONCURRENTLY: PostgreSQL refuses that while a DEFAULT partition
-- exists, and the DEFAULT partition is what keeps an insert past the last partition from
-- failing a delivery. The detached table carries its bounds in a comment, so that a
-- maintenance round that died before the retire (store/postgres/partition_retire.py) finds
-- it again (webhook_partitions_detached) instead of leaving it, and its dead queue entries,
-- for ever.
CREATE OR REPLACE FUNCTION webhook_partition_detach(parent regclass, part regclass)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    b record;
BEGIN
    PERFORM pg_advisory_xact_lock(webhook_partition_retire_lock());
    IF part IS NULL OR NOT EXISTS (SELECT 1 FROM pg_inherits AS i
                                    WHERE i.inhrelid = part AND i.inhparent = parent) THEN
        RETURN NULL;  -- gone, or detached by another run meanwhile
    END IF;
    IF parent = 'webhook_event'::regclass AND webhook_partition_busy(part) THEN
        RETURN false;
    END IF;
    SELECT p.lower_bound, p.upper_bound INTO b
      FROM webhook_partitions(parent) AS p WHERE p.part = webhook_partition_detach.part;
    EXECUTE format('ALTER TABLE %s DETACH PARTITION %s', parent, part);
    IF parent = 'webhook_event'::regclass THEN
        IF webhook_partition_queued(part) THEN
            RAISE EXCEPTION 'partition % holds a waiting queue entry', part
                USING ERRCODE = 'object_in_use';  -- rolls the detach back
        END IF;
    END IF;
    EXECUTE format('COMMENT ON TABLE %s IS %L', part, json_build_object(
        'webhook_sidecar_detached_from', parent::text,
        'lower_bound', b.lower_bound, 'upper_bound', b.upper_bound)::text);
    RETURN true;
END
$$;

-- The tables webhook_partition_detach detached that no retire (partition_retire.py) has dropped
-- or attached again yet (the round that detached them died), with their parent and bounds.
CREATE OR REPLACE FUNCTION webhook_partitions_detached()
RETURNS TABLE (part regclass, parent regclass, lower_bound timestamptz,
               upper_bound timestamptz)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    r record;
    note jsonb;
BEGIN
    FOR r IN SELECT c.oid::regclass AS rel, obj_description(c.oid, 'pg_class') AS text
               FROM pg_class AS c
              WHERE c.relkind = 'r' AND NOT c.relispartition
                AND c.relnamespace = current_schema()::regnamespace
                AND obj_description(c.oid, 'pg_class') LIKE '{"webhook_sidecar_detached_from"%'
    LOOP
        BEGIN  -- a comment edited by hand is skipped, not an error that stops every run
            note := r.text::jsonb;
            part := r.rel;
            parent := to_regclass(note ->> 'webhook_sidecar_detached_from');
            lower_bound := (note ->> 'lower_bound')::timestamptz;
            upper_bound := (note ->> 'upper_bound')::timestamptz;
        EXCEPTION WHEN others THEN
            CONTINUE;
        END;
        IF parent IS NOT NULL AND upper_bound IS NOT NULL THEN
            RETURN NEXT;
        END IF;
    END LOOP;
END
$$;
