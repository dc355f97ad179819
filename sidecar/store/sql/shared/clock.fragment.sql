-- The statement's clock, constant within it, where a fragment compares with it: the one-row
-- CTE t's ts, which the query defines (held_back.fragment.sql).
(SELECT ts FROM t)
