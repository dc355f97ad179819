SELECT {{binding}} FROM webhook_nonce WHERE provider = :provider::text AND nonce = :nonce::text;
