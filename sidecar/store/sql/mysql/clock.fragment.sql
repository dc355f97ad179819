-- The statement's clock where a fragment compares with it (held_back.fragment.sql): the
-- server's own, constant within a statement, as MySQL's locking reads take no CTE t.
{{now}}
