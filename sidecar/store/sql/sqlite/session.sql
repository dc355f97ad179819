-- FULL: a claim is on disk (WAL fsynced) before the statement returns, so a crash never
-- forgets a claim that was acknowledged. NORMAL would lose the last commits on power loss.
PRAGMA synchronous = FULL;
