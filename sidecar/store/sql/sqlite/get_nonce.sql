SELECT body_sha256 FROM webhook_nonce WHERE provider = :provider AND nonce = :nonce;
