SELECT body_sha256 FROM webhook_nonce WHERE provider = :provider::text AND nonce = :nonce::text;
