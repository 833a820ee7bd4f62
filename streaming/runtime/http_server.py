"""The interactive-query HTTP endpoint of a worker (stdlib ``ThreadingHTTPServer`` in a daemon thread).

Started by ``KafkaStreams.start()`` when ``application.server`` is set, bound to that ``host:port``,
stopped by ``close()``. Answers JSON:

``GET /stores/<store>/<key>``
    ``200`` ``{"store", "key", "value", "partition", "host"}`` — the key's task runs here.
    ``404`` ``{"error": "not found", ...}`` — the key's task runs here and has no such key.
    ``421`` ``{"error": "not local", "owner": "<host:port>", "partition", "url"}`` — another instance
    runs the key's task; ask ``owner`` (``url`` is the same query there).
    ``404`` ``{"error": "unknown store", "known_stores": [...]}``.
    ``400`` — the key cannot be read as the store's key type (see :func:`key_from_text`).
    ``503`` (``Retry-After: 1``) — rebalancing, restoring, or no instance owns the key right now.
``GET /health``
    ``200`` ``{"state", "host", "active_tasks", "standby_tasks"}``; ``503`` in state ERROR/NOT_RUNNING.

Security (config keys): ``application.server.tls.cert`` and ``.key`` make it serve HTTPS (the TLS
handshake runs in the request's thread, so a slow client holds up no other); ``application.server.token``
makes every request carry ``Authorization: Bearer <token>``, else ``401`` (compared in constant time;
never logged). :class:`~streaming.runtime.remote_queries.RemoteQueries` is the client side.

Values (and keys) that are bytes are sent base64-encoded with ``"value_encoding": "base64"``
(``"key_encoding"``); values JSON cannot express are sent as ``repr`` with ``"value_encoding": "repr"``.
"""

from __future__ import annotations

import base64
import hmac
import json
import logging
import re
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import orjson

from streaming.errors import StreamsError, UnknownStateStoreError
from streaming.runtime.interactive_queries import InteractiveQueries
from streaming.serdes import BytesSerde, DoubleSerde, IntegerSerde, JsonSerde, LongSerde, Serde, StringSerde

log = logging.getLogger(__name__)

_INTEGER = re.compile(r"[+-]?\d+")
_BOUNDS = {IntegerSerde: 32, LongSerde: 64}


def key_from_text(text: str, serde: Serde[Any]) -> Any:
    """The store key a URL path segment (already percent-decoded) names, typed by the store's key serde.

    String: as is; Integer/Long: a decimal integer in the type's range; Double: ``float(text)``;
    Json: ``json.loads(text)`` (so a string key is ``"u1"`` quoted, URL-encoded); Bytes: the UTF-8
    bytes of the text. Any other serde: :class:`ValueError` (query through ``KafkaStreams.store``).
    """
    if isinstance(serde, StringSerde):
        return text
    for kind, bits in _BOUNDS.items():
        if isinstance(serde, kind):
            if not _INTEGER.fullmatch(text):
                raise ValueError(f"expected a decimal integer for a {kind.__name__.removesuffix('Serde')} key, "
                                 f"got {text!r}")
            number = int(text)
            if not -(1 << (bits - 1)) <= number < (1 << (bits - 1)):
                raise ValueError(f"{number} is out of range for a {bits}-bit key")
            return number
    if isinstance(serde, DoubleSerde):
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"expected a number for a Double key, got {text!r}") from None
    if isinstance(serde, JsonSerde):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"expected a JSON document for a Json key, got {text!r}: {exc}") from None
    if isinstance(serde, BytesSerde):
        return text.encode()
    raise ValueError(f"keys of serde {serde!r} cannot be given in a URL; query through KafkaStreams.store()")


def key_to_text(key: Any, serde: Serde[Any]) -> str:
    """The URL path segment (before percent-encoding) that :func:`key_from_text` reads back as ``key``."""
    if isinstance(serde, JsonSerde):
        return json.dumps(key)
    if isinstance(serde, BytesSerde):
        return bytes(key).decode()
    if isinstance(serde, (StringSerde, IntegerSerde, LongSerde, DoubleSerde)):
        return str(key)
    raise ValueError(f"keys of serde {serde!r} cannot be given in a URL")


def jsonable(value: Any) -> tuple[Any, str | None]:
    """``(value for a JSON body, encoding flag)``: bytes become base64 (flag ``base64``), values JSON
    cannot express become their ``repr`` (flag ``repr``); everything else is itself (flag None)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii"), "base64"
    try:
        orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return repr(value), "repr"
    return value, None


class InteractiveQueryServer:
    """Serves ``GET /stores/<store>/<key>`` and ``GET /health`` for one KafkaStreams instance."""

    def __init__(self, queries: InteractiveQueries, address: str, *, tls_cert: str = "", tls_key: str = "",
                 token: str = "") -> None:
        host, _, port = address.rpartition(":")
        if not 0 < int(port) < 65536:
            raise StreamsError(f"interactive queries: application.server {address!r} needs a port in 1-65535 (it "
                               f"is announced to the other instances as is)")
        self.queries = queries
        self.address = address
        self._bind = (host, int(port))
        self._tls = (tls_cert, tls_key) if tls_cert else None
        self._token = token
        self.scheme = "https" if self._tls else "http"
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        try:
            server = _Server(self._bind, _Handler)
        except OSError as exc:
            raise StreamsError(f"interactive queries: cannot serve HTTP on application.server "
                               f"{self.address!r}: {exc}") from exc
        if self._tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            try:
                context.load_cert_chain(*self._tls)
            except (OSError, ssl.SSLError) as exc:
                server.server_close()
                raise StreamsError(f"interactive queries: cannot load application.server.tls.cert {self._tls[0]} "
                                   f"with application.server.tls.key {self._tls[1]}: {exc}") from None
            server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
        server.queries = self.queries
        server.host_name = self.address
        server.scheme = self.scheme
        server.token = self._token
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name=f"iq-http-{self.address}", daemon=True)
        self._thread.start()
        log.info("interactive queries: serving %s://%s/stores/<store>/<key>%s", self.scheme, self.address,
                 " (bearer token required)" if self._token else "")

    def stop(self, timeout: float = 5.0) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    queries: InteractiveQueries
    host_name: str
    scheme: str
    token: str


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    server_version = "brook-iq"

    def handle(self) -> None:
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.settimeout(10)  # a client that never finishes the handshake gives up its thread
            try:
                self.connection.do_handshake()
            except (OSError, ssl.SSLError) as exc:  # plain HTTP on the HTTPS port, an untrusted client, ...
                log.debug("interactive queries: TLS handshake with %s failed: %s", self.client_address[0], exc)
                return
            self.connection.settimeout(None)
        super().handle()

    def _authorized(self) -> bool:
        if not self.server.token:
            return True
        given = self.headers.get("Authorization", "")
        scheme, _, credential = given.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(credential.strip().encode(),
                                                                   self.server.token.encode())

    def do_GET(self) -> None:
        if not self._authorized():
            self._send(401, {"error": "unauthorized", "detail": "send 'Authorization: Bearer <application.server.token>'"},
                       {"WWW-Authenticate": 'Bearer realm="brook"'})
            return
        try:
            path = urlsplit(self.path).path
            if path.rstrip("/") == "/health":
                self._health()
                return
            parts = path.split("/", 3)
            if len(parts) == 4 and parts[0] == "" and parts[1] == "stores" and parts[2] and parts[3]:
                self._key(unquote(parts[2]), unquote(parts[3]))
                return
            self._send(404, {"error": "no such endpoint", "path": path,
                             "endpoints": ["/stores/<store>/<key>", "/health"]})
        except Exception as exc:  # answer rather than drop the connection
            log.exception("interactive queries: %s failed", self.path)
            self._send(500, {"error": "internal error", "detail": f"{type(exc).__name__}: {exc}"})

    def _health(self) -> None:
        health = self.server.queries.health()
        self._send(503 if health["state"] in ("ERROR", "NOT_RUNNING") else 200, health)

    def _key(self, store: str, text: str) -> None:
        queries = self.server.queries
        host = self.server.host_name
        try:
            info = queries.store_info(store)
        except UnknownStateStoreError:
            self._send(404, {"error": "unknown store", "store": store, "known_stores": queries.store_names})
            return
        try:
            key = key_from_text(text, info.key_serde)
            result = queries.lookup(store, key)
        except ValueError as exc:
            self._send(400, {"error": "bad key", "store": store, "key": text, "detail": str(exc)})
            return
        body: dict[str, Any] = {"store": store}
        body["key"], key_encoding = jsonable(key)
        if key_encoding:
            body["key_encoding"] = key_encoding
        body["partition"] = result.partition if result.partition >= 0 else None  # None: a global store
        if result.status == "found":
            body["value"], value_encoding = jsonable(result.value)
            if value_encoding:
                body["value_encoding"] = value_encoding
            body["host"] = host
            self._send(200, body)
        elif result.status == "not_found":
            self._send(404, {"error": "not found", **body, "host": host})
        elif result.status == "not_local":
            url = f"{self.server.scheme}://{result.owner}/stores/{quote(store, safe='')}/{quote(text, safe='')}"
            self._send(421, {"error": "not local", "owner": result.owner, **body, "url": url})
        else:
            self._send(503, {"error": "unavailable", "reason": result.reason, **body, "host": host},
                       {"Retry-After": "1"})

    def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("interactive queries: %s - %s", self.address_string(), format % args)
