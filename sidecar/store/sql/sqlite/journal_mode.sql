-- WAL lets readers run beside the one writer; answers the mode now in force.
PRAGMA journal_mode = WAL;
