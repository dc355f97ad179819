-- rollback: the transaction rolled back.
ROLLBACK;
