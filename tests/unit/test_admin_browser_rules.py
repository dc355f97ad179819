"""What the admin listener refuses from a browser another website drives (``sidecar.http.access``):
a ``Host`` that is not this listener's (DNS rebinding, without a token) and a POST another site's
page made (without a token, any request it made). Pure rules over header values; the listener's
answers are in tests/integration/test_inspector.py and test_inspector_answers.py."""

from __future__ import annotations

from aiohttp.test_utils import make_mocked_request

from sidecar.http.access import browser_refusal, cross_site, host_allowed


def test_only_an_address_localhost_or_the_listen_host_is_this_listeners_host() -> None:
    for host in ("127.0.0.1", "127.0.0.1:9090", "[::1]:9090", "[::1]", "10.1.2.3:9090",
                 "localhost", "LocalHost:9090", "localhost.:9090", "sidecar-admin:9090",
                 "SIDECAR-ADMIN", None):
        assert host_allowed(host, "sidecar-admin"), host
    for host in ("attacker.example", "attacker.example:9090", "localhost.attacker.example",
                 "127.0.0.1.nip.io:9090", "", ":9090", "user@localhost", "localhost/x",
                 "localhost:99999", "[::1"):
        assert not host_allowed(host, "sidecar-admin"), host
    assert host_allowed("0.0.0.0:9090", "0.0.0.0")


def test_a_post_from_another_sites_page_is_told_by_fetch_metadata_or_origin() -> None:
    here = "localhost:9090"
    for headers in ({}, {"Sec-Fetch-Site": "same-origin"}, {"Sec-Fetch-Site": "none"},
                    {"Origin": "http://localhost:9090"}, {"Origin": "http://LOCALHOST:9090"},
                    {"Origin": "http://localhost:9090", "Sec-Fetch-Site": "same-origin"}):
        assert not cross_site(headers, here), headers
    for headers in ({"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"},
                    {"Origin": "null"}, {"Origin": "https://evil.example"},
                    {"Origin": "http://localhost:9091"}, {"Origin": "http://localhost"},
                    {"Origin": "http://[::1"}, {"Origin": "garbage"}):
        assert cross_site(headers, here), headers
    # Default ports: an Origin without one is the scheme's.
    assert not cross_site({"Origin": "https://admin.example"}, "admin.example:443")
    assert not cross_site({"Origin": "http://admin.example:80"}, "admin.example")
    assert cross_site({"Origin": "http://admin.example"}, None)


def test_without_a_token_any_request_from_another_sites_page_is_refused() -> None:
    """An <img> or a link on another site drives a GET (a listing that walks far back) as well
    as a form drives a POST. Typed URLs and bookmarks say ``none``, the inspector's own links
    ``same-origin``; curl sends neither header. With a token, a cross-site GET carries neither
    the SameSite=Strict cookie nor a bearer token, so only POSTs need refusing there."""
    def refusal(method: str, path: str, headers: dict[str, str], *, token: bool) -> str | None:
        request = make_mocked_request(method, path, headers={"Host": "127.0.0.1:9090",
                                                             **headers})
        found = browser_refusal(request, token_configured=token, admin_host="127.0.0.1")
        return None if found is None else found.reason

    for path in ("/admin/events?status=5xx&limit=500", "/ui/?state=failed", "/ui/overview",
                 "/admin/events/stripe/evt_1"):
        for method in ("GET", "HEAD"):
            for foreign in ({"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"},
                            {"Origin": "https://evil.example"}, {"Origin": "null"}):
                assert refusal(method, path, foreign, token=False) == "cross_site", foreign
                assert refusal(method, path, foreign, token=True) is None, foreign
            for own in ({}, {"Sec-Fetch-Site": "none"}, {"Sec-Fetch-Site": "same-origin"},
                        {"Origin": "http://127.0.0.1:9090"}):
                assert refusal(method, path, own, token=False) is None, own
        assert refusal("POST", path, {"Sec-Fetch-Site": "cross-site"}, token=True) == \
            "cross_site"
