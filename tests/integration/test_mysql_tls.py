"""The MySQL store over TLS (``ssl=true``, ``ssl_ca=…``) against a throwaway ``mariadbd`` that
serves a certificate of a private CA and a user that must come over TLS (``REQUIRE SSL``): with
the CA the store migrates, connects and claims; without TLS the server refuses the user; with
the system's CAs the certificate is refused; a CA file that cannot be read stops the store with
its path. Nothing here reaches the shared server."""

from __future__ import annotations

import datetime
import ipaddress
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from sidecar.config.mysql_url import parse_url
from sidecar.core.errors import StoreError
from sidecar.store.mysql import MySQLStore, migrate_mysql
from tests.mariadbserver import ThrowawayServer, admin
from tests.pgserver import run_sync

pytestmark = pytest.mark.mariadb

BODY = b"\x01" * 32
USER, PASSWORD, DATABASE = "tls_user", "tls-secret-1", "sidecar_tls"


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.TraditionalOpenSSL,
                                       serialization.NoEncryption()))


def make_certificates(folder: Path) -> dict[str, Path]:
    """A private CA, and a certificate it signs for 127.0.0.1 (the name the store verifies)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("sidecar test CA"))
          .issuer_name(_name("sidecar test CA")).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name("127.0.0.1"))
            .issuer_name(ca.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = {"ca": folder / "ca.pem", "cert": folder / "server.pem", "key": folder / "server.key"}
    paths["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths["cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, paths["key"])
    return paths


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ThrowawayServer, Path]]:
    certs = make_certificates(tmp_path_factory.mktemp("tls"))
    server = ThrowawayServer(options=[f"--ssl-ca={certs['ca']}", f"--ssl-cert={certs['cert']}",
                                      f"--ssl-key={certs['key']}"])
    try:
        server.start()
        run_sync(admin(server.dsn,
                       f"CREATE DATABASE {DATABASE} CHARACTER SET utf8mb4",
                       f"CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}' REQUIRE SSL",
                       f"GRANT ALL ON {DATABASE}.* TO '{USER}'@'%'"))
        yield server, certs["ca"]
    finally:
        server.cleanup()


def _url(server: ThrowawayServer, query: str) -> str:
    return f"mysql://{USER}:{PASSWORD}@127.0.0.1:{server.port}/{DATABASE}{query}"


async def test_with_its_ca_the_store_migrates_connects_and_claims_over_tls(
        tls_server: tuple[ThrowawayServer, Path]) -> None:
    server, ca = tls_server
    url = _url(server, f"?ssl_ca={ca}")
    await migrate_mysql(url)
    store = await MySQLStore.connect(url, min_size=1, max_size=2)
    try:
        claim = await store.claim("stripe", "evt_tls", BODY, 30.0, "owner")
        assert claim.won
    finally:
        await store.close()


async def test_without_tls_the_server_refuses_a_user_that_requires_it(
        tls_server: tuple[ThrowawayServer, Path]) -> None:
    server, _ = tls_server
    with pytest.raises(StoreError, match="Access denied"):
        await MySQLStore.connect(_url(server, ""), min_size=1, max_size=1, connect_timeout=5)


async def test_the_systems_cas_refuse_a_private_certificate(
        tls_server: tuple[ThrowawayServer, Path]) -> None:
    server, _ = tls_server
    with pytest.raises(StoreError, match=r"(?i)certificate"):
        await MySQLStore.connect(_url(server, "?ssl=true"), min_size=1, max_size=1,
                                 connect_timeout=5)


async def test_a_ca_file_that_cannot_be_read_stops_the_store_naming_it(
        tls_server: tuple[ThrowawayServer, Path], tmp_path: Path) -> None:
    server, _ = tls_server
    missing = tmp_path / "no-such-ca.pem"
    with pytest.raises(StoreError, match=re.escape(f"ssl_ca={missing}")):
        await MySQLStore.connect(_url(server, f"?ssl_ca={missing}"), min_size=1, max_size=1)


def test_ssl_ca_implies_tls_and_cannot_be_turned_off() -> None:
    target = parse_url("mysql://u@db.example:3306/app?ssl_ca=/etc/ssl/rds.pem")
    assert target.ssl and target.ssl_ca == "/etc/ssl/rds.pem"
    with pytest.raises(ValueError, match="drop ssl=false"):
        parse_url("mysql://u@db.example:3306/app?ssl=false&ssl_ca=/etc/ssl/rds.pem")
