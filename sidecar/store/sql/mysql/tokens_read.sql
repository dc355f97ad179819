-- tokens_read: what the take left, read by the taking transaction.
SELECT taken, tokens FROM webhook_rate WHERE provider = :provider;
