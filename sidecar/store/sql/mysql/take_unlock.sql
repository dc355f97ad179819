-- take_unlock: the named lock given back.
SELECT RELEASE_LOCK({{take_lock_name}}) AS released;
