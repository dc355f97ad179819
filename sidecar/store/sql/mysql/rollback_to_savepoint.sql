-- rollback_to_savepoint: the failed write of a batch undone, the others kept.
ROLLBACK TO SAVEPOINT one_write;
