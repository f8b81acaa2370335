"""The way a TensorFlow worker's gs:// paths reach the GCS emulator: an https proxy that plays www.googleapis.com.

TensorFlow's GCS filesystem (tsl gcs_file_system.cc) always calls https://www.googleapis.com and ignores
STORAGE_EMULATOR_HOST, but its curl requests honour `https_proxy`, trust the CA file named by CURL_CA_BUNDLE
(curl_http_request.cc) and skip auth when GOOGLE_AUTH_TOKEN_FOR_TESTING is set (google_auth_provider.cc). So the
proxy answers CONNECT, ends TLS itself with a certificate from a CA made here, and relays the plain requests to the
emulator's HTTP port, whose JSON API has the same paths. The emulator names its resumable upload sessions after
the Host header but with http:// (server.py's base_url), so the proxy gives those Location headers back https://,
the scheme the real service uses, or curl would go to them directly, past the proxy.

BearerGate is the other way in: the emulator's JSON API as a private bucket answers it. The emulator takes any
request; Cloud Storage takes only those with an OAuth 2.0 access token (`Authorization: Bearer TOKEN`) and answers
others 401 (https://cloud.google.com/storage/docs/json_api: "Authorization"; an anonymous read of a private object is
401). The gate relays each request that carries one of its tokens to the emulator and records which token came with it.
"""

from __future__ import annotations

import datetime
import http.client
import json
import select
import socket
import ssl
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

_NAMES = ("www.googleapis.com", "storage.googleapis.com")
# A relayed message's headers that belong to each hop: the connection's, its framing, and what the gate's own reply sets.
_OWN_HEADERS = ("connection", "transfer-encoding", "content-length", "server", "date")


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


class BearerGate:
    """The emulator (`emulator`: http://127.0.0.1:PORT) behind a check of the bearer token: `tokens` are those it accepts
    (None among them: requests with none too, as an emulator's clients send, so the gate only records them), `seen`
    each request's (method, path, token or None). `url` is what the storage-endpoint setting (or STORAGE_EMULATOR_HOST)
    takes. A context manager. The Host header goes through as the client sent it, so the emulator's upload URLs point
    back at the gate."""

    def __init__(self, emulator: str, tokens: Iterable[str | None]) -> None:
        self.target = emulator.removeprefix("http://")
        self.tokens = set(tokens)
        self.seen: list[tuple[str, str, str | None]] = []
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "the gate is not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> BearerGate:
        gate = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def relay(self) -> None:
                gate._relay(self)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = relay

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _relay(self, request: BaseHTTPRequestHandler) -> None:
        header = request.headers.get("Authorization") or ""
        token = header[len("Bearer ") :] if header.startswith("Bearer ") else None
        self.seen.append((request.command, request.path, token))
        body = request.rfile.read(int(request.headers.get("Content-Length") or 0))
        if token not in self.tokens:
            problem = {"code": 401, "message": "Anonymous caller does not have storage.objects.get access to the Google Cloud Storage object."}
            return _answer(request, 401, {"Content-Type": "application/json"}, json.dumps({"error": {**problem, "errors": [problem]}}).encode())
        upstream = http.client.HTTPConnection(self.target, timeout=60)
        try:
            headers = {key: value for key, value in request.headers.items() if key.lower() not in _OWN_HEADERS[:2]}
            upstream.request(request.command, request.path, body=body, headers=headers)
            answer = upstream.getresponse()
            data = answer.read()
            kept = {key: value for key, value in answer.getheaders() if key.lower() not in _OWN_HEADERS}
            _answer(request, answer.status, kept, data)
        finally:
            upstream.close()


def _answer(request: BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: bytes) -> None:
    request.send_response(status)
    for key, value in headers.items():
        request.send_header(key, value)
    request.send_header("Content-Length", str(len(body)))
    request.end_headers()
    request.wfile.write(body)


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
