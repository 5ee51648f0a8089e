"""The shared certificate-verification context (specsweep.measure.tls) verifies as httpx's default does.

Clients of ``http://`` servers share one context; clients of ``https://`` servers get httpx's own
(``True``), since httpcore changes a context's ALPN setting at every TLS connection. A real HTTPS
server on 127.0.0.1 with a self-signed certificate: the shared context refuses it (verification
is on, not merely cheaper), and with ``trust_env=True`` and ``SSL_CERT_FILE`` naming that
certificate it is accepted, as ``httpx.Client(verify=True, trust_env=True)`` would.
"""
from __future__ import annotations

import http.server
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from helpers import in_ci
from specsweep.measure.tls import verify_for


@pytest.fixture
def https_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    if shutil.which("openssl") is None:
        message = "needs the openssl command to make a test certificate: apt-get install -y openssl"
        if in_ci():
            pytest.fail(message + " (CI=true: .ci/run installs it; this test must run, not skip)")
        pytest.skip(message)
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)

    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}", cert
    finally:
        server.shutdown()
        server.server_close()


def test_http_clients_share_one_context_and_https_clients_get_their_own() -> None:
    ctx = verify_for("http://127.0.0.1:30000")
    assert isinstance(ctx, ssl.SSLContext) and ctx is verify_for("HTTP://other-host:1/health")  # built once
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert verify_for("https://gpu-host:30000") is True and verify_for("gpu-host:30000") is True


def test_an_untrusted_certificate_is_refused_and_ssl_cert_file_is_honoured(
        https_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    url, cert = https_server
    shared = verify_for("http://127.0.0.1")
    with httpx.Client(trust_env=False, verify=shared) as client, pytest.raises(httpx.ConnectError) as err:
        client.get(url)
    assert "CERTIFICATE_VERIFY_FAILED" in str(err.value)

    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    trusting = verify_for("http://127.0.0.1", trust_env=True)
    assert trusting is not shared and trusting is verify_for("http://h", trust_env=True)
    with httpx.Client(verify=trusting, trust_env=False) as client:  # trust_env=False: no proxy from the environment
        assert client.get(url).text == "ok"
    monkeypatch.delenv("SSL_CERT_FILE")
    assert verify_for("http://127.0.0.1", trust_env=True) is not trusting  # the environment changed: a context of its own
