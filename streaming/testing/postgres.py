"""A throwaway PostgreSQL server for tests: Debian's ``postgresql`` binaries, a fresh cluster in a temp directory.

``initdb`` makes the cluster (one superuser with a random password, SCRAM authentication), ``pg_ctl`` starts it
on a free loopback port with its unix socket in the same directory; :meth:`PostgresServer.client` runs ``psql``,
``createdb``, ... against it as that superuser; :meth:`PostgresServer.stop` stops it (``pg_ctl stop -m fast``, then ``immediate``) and removes the directory.
The server refuses to run as root, so as root every command runs as the ``postgres`` user (which Debian's package
creates) through ``runuser``; the directory is its own, outside pytest's root-only temp tree::

    with PostgresServer() as pg:
        pg.client("createdb", "app")
        engine = sqlalchemy.create_engine(pg.url("app"))
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Self

from streaming.testing.ports import free_port

__all__ = ["PostgresError", "PostgresServer", "postgres_bin_dir", "postgres_missing"]

#: The user the server runs as when the tests run as root (``postgres`` refuses root).
SERVER_USER = "postgres"


class PostgresError(RuntimeError):
    """The server could not be set up or started (names the command and its output)."""


def postgres_bin_dir() -> Path | None:
    """The newest ``/usr/lib/postgresql/<version>/bin`` holding ``initdb`` (Debian's layout), else ``None``."""
    found = [p.parent for p in Path("/usr/lib/postgresql").glob("*/bin/initdb")]
    return max(found, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0, default=None)


def postgres_missing() -> str | None:
    """Why no throwaway server can run here, or ``None``."""
    if postgres_bin_dir() is None:
        return "no PostgreSQL server binaries (Debian: apt-get install postgresql)"
    if os.geteuid() == 0 and (shutil.which("runuser") is None or not _user_exists(SERVER_USER)):
        return f"running as root without runuser or a {SERVER_USER!r} user to run the server as"
    return None


def _user_exists(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


class PostgresServer:
    """A PostgreSQL cluster on ``host`` (a free port), superuser ``user`` with a random ``password``."""

    def __init__(self, user: str = "brook", host: str = "127.0.0.1") -> None:
        bin_dir = postgres_bin_dir()
        if bin_dir is None:
            raise PostgresError(postgres_missing() or "no PostgreSQL")
        self.bin_dir, self.user, self.host = bin_dir, user, host
        self.password = secrets.token_hex(16)
        self.port = free_port(host)
        self.root: Path | None = None

    @property
    def data_dir(self) -> Path:
        """The cluster's data directory."""
        assert self.root is not None, "not started"
        return self.root / "data"

    def url(self, database: str, user: str | None = None, password: str | None = None) -> str:
        """A SQLAlchemy URL (psycopg2) for ``database`` as ``user`` (default: the superuser; holds the password)."""
        login = f"{user}:{password}" if user else f"{self.user}:{self.password}"
        return f"postgresql+psycopg2://{login}@{self.host}:{self.port}/{database}"

    def client(self, program: str, *args: str) -> None:
        """Run client ``program`` (``psql``, ``createdb``, ...) against the server as the superuser, e.g.
        ``client("createdb", "-O", "dagster", "dagster")``."""
        self._run(program, "-h", self.host, "-p", str(self.port), "-U", self.user, *args)

    def start(self) -> Self:
        """initdb, then pg_ctl start (waits until the server accepts connections)."""
        self.root = Path(tempfile.mkdtemp(prefix="brook-postgres-"))
        try:
            if os.geteuid() == 0:
                shutil.chown(self.root, SERVER_USER)
            password_file = self.root / "password"
            password_file.write_text(self.password + "\n")
            if os.geteuid() == 0:
                shutil.chown(password_file, SERVER_USER)
            self._run("initdb", "-D", str(self.data_dir), "-U", self.user, "--auth=scram-sha-256",
                      f"--pwfile={password_file}", "--encoding=UTF8", "--no-sync", "--no-instructions")
            password_file.unlink()
            self.start_server()
        except BaseException:
            self.stop()
            raise
        return self

    def start_server(self) -> None:
        """Start the server on the cluster made by :meth:`start` (again, after :meth:`stop_server`)."""
        assert self.root is not None, "not started"
        options = f"-p {self.port} -k {self.root} -c listen_addresses={self.host} -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data_dir), "-l", str(self.root / "server.log"), "-o", options,
                  "-w", "-t", "60", "start")

    def stop_server(self) -> None:
        """Stop the server, keeping its cluster (a database outage; :meth:`start_server` brings it back)."""
        self._run("pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "-t", "30", "stop")

    def stop(self) -> None:
        """Stop the server (fast shutdown, immediate if that fails) and remove its directory."""
        if self.root is None:
            return
        if (self.data_dir / "postmaster.pid").exists():
            try:
                self._run("pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "-t", "30", "stop")
            except PostgresError:
                self._run("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "-t", "30", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    def _run(self, program: str, *args: str) -> None:
        command = [str(self.bin_dir / program), *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", SERVER_USER, "--", *command]
        result = subprocess.run(command, env={**os.environ, "PGPASSWORD": self.password}, capture_output=True,
                                text=True, timeout=120, check=False, cwd=self.root)
        if result.returncode != 0:
            raise PostgresError(f"{program} failed (exit {result.returncode}): "
                                f"{(result.stdout + result.stderr).strip()[-2000:]}")

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
