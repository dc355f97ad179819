-- begin: a transaction.
START TRANSACTION;
