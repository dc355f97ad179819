"""What the admin listener refuses from a browser another website drives (``sidecar.http.access``):
a ``Host`` that is not this listener's (DNS rebinding, without a token) and a POST another site's
page made. Pure rules over header values; the listener's answers are in
tests/integration/test_inspector.py."""

from __future__ import annotations

from sidecar.http.access import cross_site, host_allowed


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
