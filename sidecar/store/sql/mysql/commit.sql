-- commit: the transaction committed.
COMMIT;
