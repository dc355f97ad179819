-- savepoint: one write of a batch begins (rolled back alone if it fails).
SAVEPOINT one_write;
