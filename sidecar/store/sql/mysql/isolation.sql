-- isolation: READ COMMITTED for every transaction of the session.
SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED;
