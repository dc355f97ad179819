-- take_unlock: the named lock given back.
SELECT RELEASE_LOCK(CONCAT('webhook-sidecar:take:', DATABASE(), ':', :provider)) AS released;
