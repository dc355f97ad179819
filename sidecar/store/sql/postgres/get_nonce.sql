SELECT body_sha256 FROM webhook_nonce WHERE provider = $1::text AND nonce = $2::text;
