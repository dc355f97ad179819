const crypto = require("node:crypto");

const key = Buffer.from(process.env.WEBHOOK_SIDECAR_SIGNING_SECRET.replace(/^whsec_/, ""), "base64");
const TOLERANCE = 300; // seconds, either way

// rawBody: the request body as a Buffer (e.g. express.raw({ type: "*/*" })); headers: req.headers
function fromTheProxy(rawBody, headers) {
  const id = headers["webhook-id"] ?? "";
  const timestamp = headers["webhook-timestamp"] ?? "";
  if (!/^[0-9]+$/.test(timestamp)) return false;
  if (Math.abs(Date.now() / 1000 - Number(timestamp)) > TOLERANCE) return false;
  const digest = crypto.createHmac("sha256", key).update(`${id}.${timestamp}.`).update(rawBody).digest("base64");
  const expected = Buffer.from(`v1,${digest}`);
  return (headers["webhook-signature"] ?? "").split(" ").some((given) => {
    const bytes = Buffer.from(given);
    return bytes.length === expected.length && crypto.timingSafeEqual(bytes, expected);
  });
}

module.exports = { fromTheProxy };
