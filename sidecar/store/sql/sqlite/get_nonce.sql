SELECT {{binding}} FROM webhook_nonce WHERE provider = :provider AND nonce = :nonce;
