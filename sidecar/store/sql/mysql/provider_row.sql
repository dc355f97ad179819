-- provider_row: a provider's state row, running and closed, inserted. ER_DUP_ENTRY (1062):
-- it exists.
INSERT INTO webhook_provider_state (provider, updated_at) VALUES (:provider, {{now}});
