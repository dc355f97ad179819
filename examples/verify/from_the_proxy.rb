require "base64"
require "openssl"

SIDECAR_KEY = Base64.strict_decode64(ENV.fetch("WEBHOOK_SIDECAR_SIGNING_SECRET").delete_prefix("whsec_"))
SIDECAR_TOLERANCE = 300 # seconds, either way

# body: the raw request body (request.raw_post in Rails, request.body.read in Rack/Sinatra);
# msg_id, timestamp, signatures: the webhook-id, webhook-timestamp and webhook-signature headers
# (Rack: env["HTTP_WEBHOOK_ID"], env["HTTP_WEBHOOK_TIMESTAMP"], env["HTTP_WEBHOOK_SIGNATURE"]).
def from_the_proxy?(body, msg_id, timestamp, signatures)
  msg_id, timestamp, signatures = msg_id.to_s.b, timestamp.to_s.b, signatures.to_s.b
  return false unless timestamp.match?(/\A[0-9]+\z/)
  return false if (Time.now.to_i - timestamp.to_i).abs > SIDECAR_TOLERANCE

  signed = msg_id + "." + timestamp + "." + body.b # bytes, never decoded
  expected = "v1," + Base64.strict_encode64(OpenSSL::HMAC.digest("SHA256", SIDECAR_KEY, signed))
  signatures.split(" ").any? do |given|
    OpenSSL.secure_compare(given, expected) # constant time
  end
end
