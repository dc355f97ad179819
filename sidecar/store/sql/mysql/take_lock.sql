-- take_lock: the named lock that runs an ordered provider's takes one at a time (1: held).
SELECT GET_LOCK({{take_lock_name}}, :wait) AS locked;
