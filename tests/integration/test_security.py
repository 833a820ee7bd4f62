"""Security on the embedded broker, as far as it allows (docs/broker-limits.md):

- **TLS** end to end through a TLS-terminating proxy (Debian's ``stunnel4``; Tansu's own TLS flags do
  not work), the broker advertising the proxy's port so every client reconnects through it: an app
  with the proxy's CA counts right; with another CA it fails within seconds, naming TLS and
  certificate verification.
- **SASL**'s failure path against Tansu's ``--authentication`` (its user creation does not work, so no
  login succeeds here): SCRAM-SHA-512 fails within seconds naming authentication, without a retry
  storm, and the password is in no log line, exception or output.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from streaming import KafkaStreams, Serdes
from streaming.admin import create_topics
from streaming.broker import EmbeddedBroker
from streaming.runtime.cluster import ClusterUnreachableError
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import produce, read_topic, wait_for
from streaming.testing.tls import Authority, TlsProxy, make_authority, stunnel_binary
from tests.integration.workloads.counting import topology as counting_topology

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 2
PASSWORD = "scram-pw-7f3a91"


@dataclass
class TlsCluster:
    broker: EmbeddedBroker
    proxy: TlsProxy
    authority: Authority
    wrong: Authority  # another CA, which did not sign the proxy's certificate

    def handshake_failures(self) -> int:
        """TLS handshakes a client broke off so far (it sent an alert: one line per connection in the
        proxy's log; a bare connect-and-close, as the proxy's readiness probe does, is not counted)."""
        return sum("SSL_accept" in line and "alert" in line for line in self.proxy.log_path.read_text(errors="replace").splitlines())

    def accepted(self) -> int:
        return sum("accepted connection" in line for line in self.proxy.log_path.read_text().splitlines())


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsCluster]:
    """The embedded broker behind stunnel, advertising stunnel's port."""
    if stunnel_binary() is None:
        pytest.skip("stunnel4 is not installed and could not be (.ci/run installs it as root: apt-get install "
                    "stunnel4); the TLS tests need it in front of the embedded broker")
    base = tmp_path_factory.mktemp("tls")
    authority, wrong = make_authority(base / "ca"), make_authority(base / "other-ca", name="not-the-proxy")
    proxy = TlsProxy(authority, base / "stunnel")
    broker = EmbeddedBroker(advertised_port=proxy.port, workdir=base / "broker").start()
    try:
        with proxy.start(broker.port):
            yield TlsCluster(broker, proxy, authority, wrong)
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def authenticating_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """The embedded broker started with ``--authentication``: it refuses every client."""
    broker = EmbeddedBroker(workdir=tmp_path_factory.mktemp("auth-broker"), authentication=True).start()
    try:
        yield broker
    finally:
        broker.stop()


class ConnectionCounter:
    """A TCP relay in front of a port that counts the connections made through it (login attempts)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.opened_at: list[float] = []  # time.monotonic() of each connection, for a failure's message
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def connections(self) -> int:
        return len(self.opened_at)

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self._server.accept()
                self.opened_at.append(time.monotonic())
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
                for source, target in ((client, upstream), (upstream, client)):
                    threading.Thread(target=self._pipe, args=(source, target), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, target: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                target.sendall(data)
        for sock in (source, target):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._server.close()


def brook(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, list[str], float]:
    """Run ``brook ARGS``; return the exit code, stdout, the stderr lines and the seconds it took."""
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "streaming.cli.main", *args], cwd=ROOT, capture_output=True,
                            check=False, text=True, timeout=60, env={**os.environ, **(env or {})})
    return result.returncode, result.stdout, result.stderr.splitlines(), time.monotonic() - started


def counting_worker(bootstrap: str, name: str, state_dir: Path, *sets: str) -> tuple[list[str], dict[str, str]]:
    args = ["worker", "run", "tests.integration.workloads.counting:topology", "--set", f"bootstrap.servers={bootstrap}",
            "--set", f"application.id={name}", "--set", f"state.dir={state_dir}"]
    for item in sets:
        args += ["--set", item]
    return args, {"COUNT_INPUT": f"{name}-in", "COUNT_OUTPUT": f"{name}-out"}


def assert_one_clear_line(code: int, lines: list[str], seconds: float, *needles: str) -> None:
    """As tests/integration/test_cli_errors.py: non-zero, few lines, no traceback, one line naming the cause."""
    assert code != 0
    assert len(lines) < 10, lines
    assert not any("Traceback" in line for line in lines), lines
    assert len([line for line in lines if all(needle in line for needle in needles)]) == 1, (needles, lines)
    assert seconds < 15, seconds


def test_an_app_over_tls_through_the_proxy_counts_right(tls: TlsCluster, unique_name: str, tmp_path: Path) -> None:
    security = tls.proxy.client_security()
    bootstrap = tls.proxy.bootstrap_servers
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: PARTITIONS, sink: PARTITIONS}, client_config=security)
    records = [GeneratedRecord(f"k{i % 7}", f"v{i}", 1_700_000_000_000 + i) for i in range(300)]
    produce(bootstrap, source, records, Serdes.String(), Serdes.String(), producer_config=security)
    before = tls.accepted()
    app = KafkaStreams(counting_topology(source, sink), {
        "application.id": unique_name, "bootstrap.servers": bootstrap, "commit.interval.ms": 200,
        "state.dir": str(tmp_path), **security})
    app.start()
    try:
        def output() -> list:
            return read_topic(bootstrap, sink, Serdes.String(), Serdes.Json(), PARTITIONS, client_config=security)
        wait_for(lambda: len(output()) >= len(records), 45, f"{len(records)} counts on {sink!r}")
        assert app.exception is None
    finally:
        app.close(timeout=20)
    final = {record.key: record.value["count"] for record in sorted(output(), key=lambda r: r.value["count"])}
    assert final == dict(collections.Counter(record.key for record in records))
    assert len(output()) == len(records)
    assert tls.accepted() - before >= 3  # the app's consumer, producer and admin all came through the proxy
    assert tls.handshake_failures() == 0


def test_the_wrong_ca_fails_within_seconds_naming_tls(tls: TlsCluster, unique_name: str, tmp_path: Path) -> None:
    before = tls.handshake_failures()
    args, env = counting_worker(tls.proxy.bootstrap_servers, unique_name, tmp_path, "security.protocol=SSL",
                                f"ssl.ca.location={tls.wrong.ca}")
    code, _, lines, seconds = brook(*args, env=env)
    assert_one_clear_line(code, lines, seconds, "error:", "TLS", "certificate verification failed",
                          tls.proxy.bootstrap_servers, "ssl.ca.location")
    refused = tls.handshake_failures() - before
    assert 1 <= refused <= 5, f"{refused} TLS handshakes: a retry storm"


def test_scram_against_the_authenticating_broker_fails_fast_and_never_shows_the_password(
        authenticating_broker: EmbeddedBroker, unique_name: str, tmp_path: Path) -> None:
    counter = ConnectionCounter(authenticating_broker.port)
    bootstrap = f"127.0.0.1:{counter.port}"
    args, env = counting_worker(bootstrap, unique_name, tmp_path,
                                "security.protocol=SASL_PLAINTEXT", "sasl.mechanism=SCRAM-SHA-512",
                                "sasl.username=svc-orders")
    started = time.monotonic()
    code, out, lines, seconds = brook("--log-level", "DEBUG", *args, env={**env, "BROOK_SASL_PASSWORD": PASSWORD})
    counter.close()
    opened = [round(at - started, 2) for at in counter.opened_at]
    assert_one_clear_line(code, lines, seconds, "error:", "cannot authenticate", "SCRAM-SHA-512", "svc-orders",
                          bootstrap)
    broker_log = authenticating_broker.log_path.read_text(errors="replace")
    assert PASSWORD not in out + "\n".join(lines) + broker_log
    assert 1 <= counter.connections <= 5, (
        f"{counter.connections} login attempts for one failed start (at {opened} s): a retry storm")


def test_scram_through_the_api_raises_at_once_and_logs_no_credential(
        authenticating_broker: EmbeddedBroker, unique_name: str, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    app = KafkaStreams(counting_topology(f"{unique_name}-in", f"{unique_name}-out"), {
        "application.id": unique_name, "bootstrap.servers": authenticating_broker.bootstrap_servers,
        "state.dir": str(tmp_path), "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "svc-orders", "sasl.password": PASSWORD})
    started = time.monotonic()
    with caplog.at_level(logging.DEBUG), pytest.raises(ClusterUnreachableError) as failure:
        app.start()
    seconds = time.monotonic() - started
    assert seconds < 5, seconds
    assert "cannot authenticate" in str(failure.value)
    rdkafka_lines = [r for r in caplog.records if r.name.startswith("streaming.rdkafka")]
    assert len(rdkafka_lines) <= 5, [r.getMessage() for r in rdkafka_lines]
    shown = [str(failure.value), repr(failure.value), repr(app.config.redacted())]
    shown += [record.getMessage() for record in caplog.records]
    assert not any(PASSWORD in text for text in shown)
