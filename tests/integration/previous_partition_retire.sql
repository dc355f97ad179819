-- The previous release's webhook_partition_retire, as its `migrate` installed it (verbatim):
-- this release no longer installs it and leaves it in place for older replicas
-- (test_partitioning_upgrade.py).
-- After `part` was detached from `parent` (webhook_partition_detach, committed: its lock held
-- only for the detach), or found detached by a later round (webhook_partitions_detached), in
-- one transaction: look again, now that no proxy can reach it. An event partition that holds
-- an event still to be delivered (webhook_partition_busy), or an attempt partition with the
-- timeline of an event still waiting in the queue, is attached again (a scan of a table no
-- proxy reaches, under a lock deliveries do not wait for) and answered false: the looks under
-- the detach's locks should leave none, so this is the net under them. Else it is dropped,
-- with the dead queue entries of its events (no foreign key cascades to them; an entry whose
-- key is in the attached parent is a newer copy's, claimed after the detach, and stays), and answered
-- true. NULL: gone, or attached again, by another run (maintenance runs in every process;
-- one at a time retires, but an operator or an older release may also act).
CREATE OR REPLACE FUNCTION webhook_partition_retire(parent regclass, part regclass,
                                                    lower_bound timestamptz,
                                                    upper_bound timestamptz)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    keep boolean := false;
    keycol text := CASE WHEN parent = 'webhook_attempt'::regclass THEN 'finished_at'
                        ELSE 'received_at' END;
    fence text;
BEGIN
    IF part IS NULL THEN
        RETURN NULL;  -- gone (another run dropped it): nothing to do
    END IF;
    EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', part);
    IF (SELECT c.relispartition FROM pg_class AS c WHERE c.oid = part) THEN
        RETURN NULL;  -- attached again meanwhile (another run): not ours to drop
    END IF;
    IF parent = 'webhook_event'::regclass THEN
        keep := webhook_partition_busy(part, parent);
    ELSIF parent = 'webhook_attempt'::regclass THEN
        keep := webhook_partition_queued(part);
    END IF;
    IF keep THEN
        -- A validated CHECK of the bounds, on a table no proxy reaches, lets the attach skip
        -- its scan: its locks (the DEFAULT partition's ACCESS EXCLUSIVE, which inserts wait
        -- for) are held for a catalog change, not a scan. The caller's lock_timeout bounds
        -- the wait; dropped once attached (the partition bound says the same).
        fence := left(part::text, 40) || '_bound';
        EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I CHECK (%I < %L%s)', part, fence,
                       keycol, upper_bound, CASE WHEN lower_bound IS NULL THEN ''
                       ELSE format(' AND %I >= %L', keycol, lower_bound) END);
        EXECUTE format('ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM (%s) TO (%L)',
                       parent, part,
                       coalesce(quote_literal(lower_bound), 'MINVALUE'), upper_bound);
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', part, fence);
        EXECUTE format('COMMENT ON TABLE %s IS NULL', part);
        RETURN false;
    END IF;
    IF parent = 'webhook_event'::regclass THEN
        EXECUTE format('DELETE FROM webhook_queue AS q USING %s AS e '
                       'WHERE e.provider = q.provider AND e.event_id = q.event_id '
                       'AND NOT EXISTS (SELECT 1 FROM %s AS a WHERE a.provider = q.provider '
                       'AND a.event_id = q.event_id)', part, parent);
    END IF;
    EXECUTE format('DROP TABLE %s', part);
    RETURN true;
END
$$;
