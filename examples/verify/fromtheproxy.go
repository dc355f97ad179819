package webhooks

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

const tolerance = 300 // seconds, either way

// FromTheProxy: body is the raw request body (io.ReadAll(r.Body), before any decoding);
// header is r.Header. The key is read from WEBHOOK_SIDECAR_SIGNING_SECRET.
func FromTheProxy(body []byte, header http.Header) bool {
	key, err := base64.StdEncoding.DecodeString(
		strings.TrimPrefix(os.Getenv("WEBHOOK_SIDECAR_SIGNING_SECRET"), "whsec_"))
	if err != nil {
		return false
	}
	id := header.Get("webhook-id")
	timestamp := header.Get("webhook-timestamp")
	if timestamp == "" || strings.Trim(timestamp, "0123456789") != "" {
		return false
	}
	seconds, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return false
	}
	if age := time.Now().Unix() - seconds; age > tolerance || age < -tolerance {
		return false
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "."))
	mac.Write(body)
	expected := []byte("v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	for _, given := range strings.Split(header.Get("webhook-signature"), " ") {
		if hmac.Equal([]byte(given), expected) {
			return true
		}
	}
	return false
}
