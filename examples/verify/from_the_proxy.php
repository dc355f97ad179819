<?php

const SIDECAR_TOLERANCE = 300; // seconds, either way

/**
 * $body: the raw request body (file_get_contents('php://input'), or Laravel's
 * $request->getContent()); $id, $timestamp, $signatures: the webhook-id, webhook-timestamp and
 * webhook-signature headers ($_SERVER['HTTP_WEBHOOK_ID'], … or $request->header('webhook-id')).
 */
function from_the_proxy(string $body, ?string $id, ?string $timestamp, ?string $signatures): bool
{
    $secret = getenv('WEBHOOK_SIDECAR_SIGNING_SECRET');
    $key = base64_decode(preg_replace('/^whsec_/', '', (string) $secret), true);
    $id = (string) $id;
    $timestamp = (string) $timestamp;
    if ($key === false || !preg_match('/\A[0-9]+\z/', $timestamp)) {
        return false;
    }
    if (abs(time() - (int) $timestamp) > SIDECAR_TOLERANCE) {
        return false;
    }
    $expected = 'v1,' . base64_encode(hash_hmac('sha256', "$id.$timestamp." . $body, $key, true));
    foreach (explode(' ', (string) $signatures) as $given) {
        if (hash_equals($expected, $given)) {
            return true;
        }
    }
    return false;
}
