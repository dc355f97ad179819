-- ping: the server answers.
SELECT 1 AS ok;
