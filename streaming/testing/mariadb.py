"""A throwaway MariaDB server for tests: Debian's ``mariadb-server`` binaries, a fresh data directory in a temp dir.

``mariadb-install-db`` makes the data directory; ``mariadbd`` runs as a child process on a free loopback port with
its socket and its temp files (``--tmpdir``) in the same directory, and an init file creates the database ``brook``
and a user ``brook`` (who may create databases) with a random password on every start.
:meth:`MariaDBServer.stop_server` / :meth:`MariaDBServer.start_server` stop and start it keeping its data (a database
outage); :meth:`MariaDBServer.stop` stops it and removes the directory::

    with MariaDBServer() as db:
        engine = sqlalchemy.create_engine(db.url())
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from streaming.testing.ports import free_port

__all__ = ["MariaDBError", "MariaDBServer", "mariadb_missing"]

DATABASE = "brook"
USER = "brook"


class MariaDBError(RuntimeError):
    """The server could not be set up or started (names the command and its output)."""


def _binary(name: str) -> str | None:
    return shutil.which(name) or next((str(p) for p in (Path("/usr/sbin") / name, Path("/usr/bin") / name)
                                       if p.exists()), None)


def mariadb_missing() -> str | None:
    """Why no throwaway server can run here, or ``None``."""
    missing = [name for name in ("mariadb-install-db", "mariadbd") if _binary(name) is None]
    if missing:
        return f"no MariaDB server binaries ({', '.join(missing)}; Debian: apt-get install mariadb-server)"
    return None


class MariaDBServer:
    """A MariaDB server on ``host`` (a free port) with database ``brook``, user ``brook`` and a random password."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        missing = mariadb_missing()
        if missing:
            raise MariaDBError(missing)
        self.host = host
        self.port = free_port(host)
        self.password = secrets.token_hex(16)
        self.root: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def url(self, database: str = DATABASE, driver: str = "mysql+pymysql") -> str:
        """A SQLAlchemy URL for ``database`` as user ``brook`` (holds the password)."""
        return f"{driver}://{USER}:{self.password}@{self.host}:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create database ``name`` (``brook`` may create any); returns its URL."""
        import pymysql

        with pymysql.connect(host=self.host, port=self.port, user=USER, password=self.password) as connection:
            connection.cursor().execute(f"CREATE DATABASE `{name}`")
        return self.url(name)

    def start(self) -> Self:
        """mariadb-install-db, then start the server (waits until it accepts connections)."""
        self.root = Path(tempfile.mkdtemp(prefix="brook-mariadb-"))
        try:
            (self.root / "init.sql").write_text(
                f"CREATE DATABASE IF NOT EXISTS {DATABASE};\n"
                f"CREATE USER IF NOT EXISTS '{USER}'@'%' IDENTIFIED BY '{self.password}';\n"
                f"GRANT ALL ON *.* TO '{USER}'@'%';\n")
            (self.root / "tmp").mkdir()
            result = subprocess.run(
                [_binary("mariadb-install-db"), "--no-defaults", f"--datadir={self.root / 'data'}",
                 f"--tmpdir={self.root / 'tmp'}", *self._as_user(), "--skip-test-db",
                 "--auth-root-authentication-method=socket"],
                capture_output=True, text=True, timeout=120, check=False)
            if result.returncode != 0:
                raise MariaDBError(f"mariadb-install-db failed (exit {result.returncode}): "
                                   f"{(result.stdout + result.stderr).strip()[-2000:]}")
            self.start_server()
        except BaseException:
            self.stop()
            raise
        return self

    def _as_user(self) -> list[str]:
        return ["--user=root"] if os.geteuid() == 0 else []

    def start_server(self, timeout: float = 60.0) -> None:
        """Start ``mariadbd`` on the data directory made by :meth:`start` (again, after :meth:`stop_server`)."""
        assert self.root is not None, "not started"
        log = open(self.root / "server.log", "ab")  # noqa: SIM115 - the server writes it while it runs
        self._process = subprocess.Popen(
            [_binary("mariadbd"), "--no-defaults", f"--datadir={self.root / 'data'}", f"--tmpdir={self.root / 'tmp'}",
             *self._as_user(),
             f"--socket={self.root / 'mysqld.sock'}", f"--port={self.port}", f"--bind-address={self.host}",
             f"--pid-file={self.root / 'mysqld.pid'}", f"--init-file={self.root / 'init.sql'}",
             "--skip-name-resolve", "--innodb-buffer-pool-size=64M", "--innodb-flush-log-at-trx-commit=2",
             "--skip-log-bin"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self._process.poll() is not None:
                raise MariaDBError(f"mariadbd exited with {self._process.returncode}: {self._log_tail()}")
            if time.monotonic() > deadline:
                raise MariaDBError(f"mariadbd did not accept connections within {timeout:.0f} s: {self._log_tail()}")
            time.sleep(0.1)

    def _answers(self) -> bool:
        import pymysql

        try:
            pymysql.connect(host=self.host, port=self.port, user=USER, password=self.password, database=DATABASE,
                            connect_timeout=2).close()
        except pymysql.err.MySQLError:
            return False
        return True

    def _log_tail(self) -> str:
        assert self.root is not None
        return (self.root / "server.log").read_text(errors="replace")[-2000:]

    def stop_server(self) -> None:
        """Stop ``mariadbd`` (SIGTERM, SIGKILL after 30 s), keeping its data (a database outage)."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def stop(self) -> None:
        """Stop the server and remove its directory."""
        self.stop_server()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
