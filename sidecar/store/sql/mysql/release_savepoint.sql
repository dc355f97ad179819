-- release_savepoint: one write of a batch done.
RELEASE SAVEPOINT one_write;
