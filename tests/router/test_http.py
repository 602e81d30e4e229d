"""The router's HTTP side: one TLS context per process, still following the CA settings."""

from __future__ import annotations

import re
from pathlib import Path

import certifi
import pytest

from searchfuse.router._http import HTTP, tls_context

PEM = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----\n", re.DOTALL)


def test_every_pool_of_the_process_verifies_with_one_context(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    pools = [HTTP("https://api.tavily.com", lambda key: {}) for _ in range(3)]
    try:
        contexts = {id(tls_context())} | {
            id(pool.client._transport._pool._ssl_context)  # type: ignore[attr-defined]
            for pool in pools
        }
    finally:
        for pool in pools:
            pool.close()
    assert len(contexts) == 1
    assert len(tls_context().get_ca_certs()) > 50  # certifi's bundle


def test_the_context_follows_ssl_cert_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    one_ca = tmp_path / "one-ca.pem"
    first = PEM.search(Path(certifi.where()).read_text(encoding="ascii"))
    assert first is not None
    one_ca.write_text(first.group(0), encoding="ascii")
    monkeypatch.setenv("SSL_CERT_FILE", str(one_ca))

    assert len(tls_context().get_ca_certs()) == 1
    monkeypatch.delenv("SSL_CERT_FILE")
    assert len(tls_context().get_ca_certs()) > 50
