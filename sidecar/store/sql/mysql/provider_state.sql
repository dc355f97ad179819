-- provider_state: one provider's hold state (read after a guarded write).
SELECT {{provider_state}} FROM webhook_provider_state WHERE provider = :provider;
