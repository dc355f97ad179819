-- get_nonce: a nonce's binding.
SELECT {{binding}} FROM webhook_nonce WHERE provider = :provider AND nonce = :nonce;
