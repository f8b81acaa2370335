"""The way a TensorFlow worker's gs:// paths reach the GCS emulator: an https proxy that plays www.googleapis.com.

TensorFlow's GCS filesystem (tsl gcs_file_system.cc) always calls https://www.googleapis.com and ignores
STORAGE_EMULATOR_HOST, but its curl requests honour `https_proxy`, trust the CA file named by CURL_CA_BUNDLE
(curl_http_request.cc) and skip auth when GOOGLE_AUTH_TOKEN_FOR_TESTING is set (google_auth_provider.cc). So the
proxy answers CONNECT, ends TLS itself with a certificate from a CA made here, and relays the plain requests to the
emulator's HTTP port, whose JSON API has the same paths. The emulator names its resumable upload sessions after
the Host header but with http:// (server.py's base_url), so the proxy gives those Location headers back https://,
the scheme the real service uses, or curl would go to them directly, past the proxy.
"""

from __future__ import annotations

import datetime
import select
import socket
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_NAMES = ("www.googleapis.com", "storage.googleapis.com")


def _certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA (ca.pem, for CURL_CA_BUNDLE) and a server certificate for Google's API hosts signed by it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tpuctl test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, _NAMES[0])]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in _NAMES]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))  # fmt: skip
    pem = serialization.Encoding.PEM
    paths = (folder / "ca.pem", folder / "server.pem", folder / "server.key")
    paths[0].write_bytes(ca.public_bytes(pem))
    paths[1].write_bytes(cert.public_bytes(pem))
    paths[2].write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return paths


@dataclass
class GcsProxy:
    """A running proxy: `env` is what a TensorFlow process needs for its gs:// paths to land in the emulator."""

    ca: Path
    port: int
    _listener: socket.socket
    _threads: list[threading.Thread] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        return {"https_proxy": f"http://127.0.0.1:{self.port}", "CURL_CA_BUNDLE": str(self.ca),
                "GOOGLE_AUTH_TOKEN_FOR_TESTING": "test-token"}  # fmt: skip

    def stop(self) -> None:
        self._listener.close()


def start_gcs_proxy(folder: Path, emulator: str) -> GcsProxy:
    """Start the proxy in daemon threads, relaying to `emulator` (http://127.0.0.1:PORT)."""
    ca, cert, key = _certificates(folder)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    target = emulator.removeprefix("http://").rsplit(":", 1)
    listener = socket.create_server(("127.0.0.1", 0))
    proxy = GcsProxy(ca, listener.getsockname()[1], listener)

    def serve() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=_tunnel, args=(client, context, (target[0], int(target[1]))), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return proxy


def _tunnel(client: socket.socket, context: ssl.SSLContext, target: tuple[str, int]) -> None:
    """One CONNECT: say yes, end TLS, then copy bytes both ways until either side closes."""
    with client:
        request = b""
        while b"\r\n\r\n" not in request:
            chunk = client.recv(4096)
            if not chunk:
                return
            request += chunk
        if not request.startswith(b"CONNECT "):
            client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            return
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        try:
            secure = context.wrap_socket(client, server_side=True)
        except (ssl.SSLError, OSError):
            return
        with secure, socket.create_connection(target) as upstream:
            _relay(secure, upstream)


def _relay(secure: ssl.SSLSocket, upstream: socket.socket) -> None:
    while True:
        ready = [secure] if secure.pending() else select.select([secure, upstream], [], [], 60)[0]
        if not ready:
            return
        for side in ready:
            other = upstream if side is secure else secure
            try:
                data = side.recv(65536)
            except (ssl.SSLError, OSError):
                return
            if not data:
                return
            if side is upstream:
                data = data.replace(b"\r\nLocation: http://", b"\r\nLocation: https://")
            other.sendall(data)


def keep_gcs_upload_contract() -> None:
    """Make gcp-storage-emulator take two uploads as Cloud Storage does, both of which TensorFlow sends:

    - a body sent chunked AND with a Content-Length (TF's resumable-upload PUTs carry both): HTTP/1.1 says the
      chunked coding wins (RFC 9112 6.3); the emulator read Content-Length bytes of the chunked stream
      (`hello` was stored as `5\\r\\nhe`);
    - a media upload with an empty body (TF's "directory" objects, `name=ck/`): an empty object; the emulator
      failed on its missing body (len(None)).
    Idempotent; affects this process's emulators only."""
    from gcp_storage_emulator import server
    from gcp_storage_emulator.handlers import objects

    if getattr(server._read_raw_data, "keeps_contract", False):
        return
    read_raw, media_upload = server._read_raw_data, objects._media_upload

    def read_chunked_first(handler: Any) -> Any:
        if (handler.headers.get("Transfer-Encoding") or "").lower() == "chunked":
            del handler.headers["Content-Length"]
        return read_raw(handler)

    def empty_is_an_object(request: Any, response: Any, storage: Any) -> Any:
        if request.data is None:
            request._data = b""
        return media_upload(request, response, storage)

    read_chunked_first.keeps_contract = True  # type: ignore[attr-defined]
    server._read_raw_data = read_chunked_first
    objects._media_upload = empty_is_an_object
