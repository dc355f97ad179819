-- FULL: a claim is on disk (WAL fsynced) before the statement returns, so a crash never
-- forgets a claim that was acknowledged. NORMAL would lose the last commits on power loss.
PRAGMA synchronous = FULL;
-- Enforce foreign keys on this connection (SQLite's default is off, per connection): a queue
-- entry belongs to an event row, and retention deleting the row deletes the entry with it.
PRAGMA foreign_keys = ON;
