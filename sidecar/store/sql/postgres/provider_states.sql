-- Every provider's hold state (a row only for a provider ever paused or failing).
SELECT {{provider_state}} FROM webhook_provider_state ORDER BY provider;
