"""A TCP proxy in front of a broker that holds back the requests of chosen Kafka clients: to them the broker is
unreachable, to every other client of the same process it answers as usual.

Every Kafka request starts with its header: api key, api version, correlation id and the client id, a plain
nullable string in every header version (KIP-482 left it out of the compact encoding). The proxy reads each
request frame, and while the client id of its connection starts with a held prefix the request waits in the proxy;
released, the waiting requests go on in order (a client that gave up on them meanwhile has closed the connection,
and they go nowhere). Responses pass through untouched. The broker must name the proxy's port in its metadata
(``EmbeddedBroker(advertised_port=proxy.port)``), or clients reconnect past it::

    port = free_port()
    proxy = KafkaProxy().start(port)   # serving before the broker's start-up check reads metadata through it
    with EmbeddedBroker(port=port, advertised_port=proxy.port, workdir=...):
        proxy.hold("app-stream-time-reader")   # that client's requests wait
        ...
        proxy.release("app-stream-time-reader")
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from types import TracebackType
from typing import Self

__all__ = ["KafkaProxy"]


def _receive(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return bytes(data)


def client_id(frame: bytes) -> str | None:
    """The client id in a request frame (after its 4-byte size): int16 api key, int16 version, int32 correlation
    id, then an int16 length and the id's bytes (-1: none)."""
    (length,) = struct.unpack_from(">h", frame, 8)
    return None if length < 0 else frame[10:10 + length].decode("utf-8", "replace")


class KafkaProxy:
    """Forwards ``host:port`` (a free port, chosen at construction) to the broker's port; see the module docstring."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self._listener = socket.create_server((host, 0))
        self.port: int = self._listener.getsockname()[1]
        self._target: tuple[str, int] | None = None
        self._held: set[str] = set()
        self._changed = threading.Condition()
        self._sockets: list[socket.socket] = []
        self.held_requests: dict[str, int] = {}  # per held prefix: requests that waited for it

    def start(self, target_port: int, target_host: str = "127.0.0.1") -> Self:
        self._target = (target_host, target_port)
        threading.Thread(target=self._accept, name="kafka-proxy", daemon=True).start()
        return self

    def hold(self, prefix: str) -> None:
        """From now on, requests of clients whose id starts with ``prefix`` wait in the proxy."""
        with self._changed:
            self._held.add(prefix)
            self.held_requests.setdefault(prefix, 0)

    def release(self, prefix: str) -> None:
        """Let the waiting requests of ``prefix``'s clients go on, and the next ones through."""
        with self._changed:
            self._held.discard(prefix)
            self._changed.notify_all()

    def close(self) -> None:
        with self._changed:
            self._held.clear()
            self._changed.notify_all()
        for sock in [self._listener, *self._sockets]:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        assert self._target is not None
        while True:
            try:
                client, _ = self._listener.accept()
                broker = socket.create_connection(self._target)
            except OSError:
                return  # closed
            self._sockets += [client, broker]
            threading.Thread(target=self._requests, args=(client, broker), daemon=True).start()
            threading.Thread(target=self._responses, args=(broker, client), daemon=True).start()

    def _requests(self, client: socket.socket, broker: socket.socket) -> None:
        try:
            while True:
                size = _receive(client, 4)
                frame = _receive(client, struct.unpack(">i", size)[0])
                self._wait_while_held(client_id(frame) or "")
                broker.sendall(size + frame)
        except OSError:
            pass
        finally:
            for sock in (client, broker):
                with contextlib.suppress(OSError):
                    sock.close()

    def _wait_while_held(self, sender: str) -> None:
        with self._changed:
            held = [prefix for prefix in self._held if sender.startswith(prefix)]
            for prefix in held:
                self.held_requests[prefix] += 1
            self._changed.wait_for(lambda: not any(sender.startswith(prefix) for prefix in self._held))

    @staticmethod
    def _responses(broker: socket.socket, client: socket.socket) -> None:
        try:
            while chunk := broker.recv(65536):
                client.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (client, broker):
                with contextlib.suppress(OSError):
                    sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
