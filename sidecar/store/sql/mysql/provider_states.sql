-- provider_states: every provider's hold state.
SELECT {{provider_state}} FROM webhook_provider_state ORDER BY provider;
