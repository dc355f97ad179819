-- One page of the event listing, newest first in the order (received_at DESC, provider,
-- event_id): the first :limit + 1 rows after the cursor (:cursor_us, :cursor_provider,
-- :cursor_event_id; all NULL for the first page) passing every filter given. The caller keeps
-- :limit of them and makes the last one's key the next cursor.
--
-- webhook_event indexes only immutable columns (0001_init.sql), so the page is read as one
-- backward walk of (provider, received_at) per provider in :providers (a JSON array), from the
-- cursor (page_range.fragment.sql), the filters applied along the walk
-- (page_filter.fragment.sql), each walk stopped at :limit + 1 rows; then only those,
-- providers × (:limit + 1) rows at most, are merged and sorted. No OFFSET paging, no sort of
-- the table.
--
-- The walk is a subquery fenced by OFFSET 0, with the filters outside it: the planner then
-- plans the walk for the :limit + 1 rows the LIMIT asks for, whatever it guesses of the
-- filters. Left to itself, for a filter it thinks rare (a state, a status class) it reads the
-- provider's whole range by bitmap and sorts it: the rows read are the same when nothing
-- matches, but a page found early costs the whole history. Within one provider the index
-- orders rows by received_at only: the Incremental Sort by event_id sorts each group of equal
-- times, never more. Text compares in the "C" collation (code points), as SQLite and the
-- cursor's other users do; received_us is exact (extract gives a numeric).
--
-- in_queue is read in the outer SELECT, after the final LIMIT: one lookup of webhook_queue's
-- key per row returned. Inside the walk, and as an EXISTS, the planner read and hashed the
-- whole queue instead (20 000 entries: most of a page's time).
SELECT {{event_row}},
       -- in_queue.fragment.sql as a scalar subquery: an EXISTS the planner may hash (a read of the
       -- whole queue), a scalar subquery it runs per row.
       (SELECT true FROM webhook_queue AS q
         WHERE q.provider = e.provider AND q.event_id = e.event_id) IS NOT NULL AS in_queue,
       e.received_us
  FROM (SELECT page.*
          FROM jsonb_array_elements_text(:providers::jsonb) AS wanted (provider)
         CROSS JOIN LATERAL (
               SELECT e.*
                 FROM (SELECT e.*,
                              (extract(epoch FROM e.received_at) * 1000000)::bigint AS received_us,
                              ({{page_filter}}) AS passes
                         FROM webhook_event AS e
                        WHERE e.provider = wanted.provider
                          AND {{page_range}}
                        ORDER BY e.received_at DESC, e.event_id COLLATE "C"
                       OFFSET 0) AS e
                WHERE e.passes
                LIMIT :limit::integer + 1
               ) AS page
         ORDER BY page.received_us DESC, page.provider COLLATE "C", page.event_id COLLATE "C"
         LIMIT :limit::integer + 1) AS e
 ORDER BY e.received_us DESC, e.provider COLLATE "C", e.event_id COLLATE "C";
