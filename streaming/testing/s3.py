"""A local S3 server for tests: moto's ``moto_server``, so the embedded broker can keep its data across restarts.

The embedded broker (Tansu) keeps everything in memory by default; with ``--storage-engine s3://<bucket>/``
it keeps topics, records, committed offsets and group state in an S3 bucket, and a broker restarted on
the same bucket has them all back. :class:`S3Server` runs moto's S3 server (the ``moto[server]`` dev
dependency) as a child process on a free loopback port and makes buckets in it; :meth:`S3Server.broker_env`
is what Tansu 0.6.0's S3 storage needs in its environment (measured: without ``AWS_ENDPOINT`` it goes to
AWS, without ``AWS_ALLOW_HTTP=true`` it refuses the ``http://`` endpoint, without an access key id it
exits at start-up; the region defaults to ``us-east-1``)::

    with S3Server(tmp_path / "s3") as s3:
        bucket = s3.create_bucket("brook")
        broker = EmbeddedBroker(storage_engine=f"s3://{bucket}/", env=s3.broker_env(), workdir=...)

The credentials are moto's placeholders (moto checks none); this server is for tests only.
"""

from __future__ import annotations

import contextlib
import importlib.util
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Self
from xml.etree import ElementTree

__all__ = ["S3Server", "S3ServerError"]

#: Placeholder credentials: moto accepts any, Tansu's S3 client insists on having some.
_ACCESS_KEY_ID = "brook-test"
_SECRET_ACCESS_KEY = "brook-test-secret"
_REGION = "us-east-1"
_S3_NAMESPACE = "{http://s3.amazonaws.com/doc/2006-03-01/}"


class S3ServerError(RuntimeError):
    """moto's S3 server is not installed, did not start, or refused a request."""


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class S3Server:
    """``moto_server`` (S3 only used) as a child process on ``host:port`` (a free port by default).

    :meth:`start` returns once it answers HTTP; :meth:`stop` (or leaving the ``with`` block) ends it, and with
    it every bucket: moto keeps them in memory.
    """

    def __init__(self, workdir: Path, host: str = "127.0.0.1", port: int | None = None) -> None:
        self.workdir = workdir
        self.host = host
        self.port = port or _free_port(host)
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """The server's URL, e.g. ``http://127.0.0.1:43211``."""
        return f"http://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "moto.log"

    def broker_env(self) -> dict[str, str]:
        """The environment Tansu's S3 storage engine needs to use this server (``EmbeddedBroker(env=...)``)."""
        return {"AWS_ENDPOINT": self.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": _ACCESS_KEY_ID,
                "AWS_SECRET_ACCESS_KEY": _SECRET_ACCESS_KEY, "AWS_DEFAULT_REGION": _REGION}

    def start(self, timeout: float = 30.0) -> Self:
        """Start ``moto_server`` and wait until it answers.

        Raises:
            S3ServerError: moto (``moto[server]``) is not installed, the server exited, or it did not answer
                within ``timeout`` seconds (the message has the end of its log).
        """
        if importlib.util.find_spec("moto") is None or importlib.util.find_spec("flask") is None:
            raise S3ServerError("moto's S3 server is not installed (pip install 'moto[server]', in the dev extra)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "--host", self.host, "--port", str(self.port)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
                start_new_session=True)
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self._process.poll() is not None:
                raise S3ServerError(f"moto_server exited with code {self._process.returncode} at start-up: "
                                    f"{self._log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise S3ServerError(f"moto_server did not answer on {self.endpoint} within {timeout:g} s: "
                                    f"{self._log_tail()}")
            time.sleep(0.1)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """End the server (SIGTERM, then SIGKILL after ``timeout`` seconds); safe to call when not running."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def create_bucket(self, name: str) -> str:
        """Create the bucket ``name`` (path-style, as Tansu addresses it); returns its name."""
        self._request("PUT", f"/{name}")
        return name

    def list_keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object key in ``bucket`` under ``prefix``, in key order."""
        keys: list[str] = []
        token: str | None = None
        while True:
            query = {"list-type": "2", "prefix": prefix, **({"continuation-token": token} if token else {})}
            root = ElementTree.fromstring(self._request("GET", f"/{bucket}?{urllib.parse.urlencode(query)}"))
            keys.extend(element.text or "" for element in root.iter(f"{_S3_NAMESPACE}Key"))
            token = root.findtext(f"{_S3_NAMESPACE}NextContinuationToken")
            if root.findtext(f"{_S3_NAMESPACE}IsTruncated") != "true" or not token:
                return keys

    def read_object(self, bucket: str, key: str) -> bytes:
        """The content of object ``key`` in ``bucket`` (a signed request: moto refuses anonymous reads)."""
        import boto3  # moto's dependency; imported here, it takes a moment

        client = boto3.client("s3", endpoint_url=self.endpoint, region_name=_REGION,
                              aws_access_key_id=_ACCESS_KEY_ID, aws_secret_access_key=_SECRET_ACCESS_KEY)
        return bytes(client.get_object(Bucket=bucket, Key=key)["Body"].read())

    def _request(self, method: str, path: str) -> bytes:
        request = urllib.request.Request(self.endpoint + path, method=method)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return bytes(response.read())
        except (urllib.error.URLError, OSError) as exc:
            raise S3ServerError(f"moto_server {method} {path}: {exc}") from exc

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint}/moto-api/data.json", timeout=1):
                return True
        except (urllib.error.URLError, OSError):
            return False

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> Self:
        if self._process is None:
            self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        with contextlib.suppress(Exception):
            self.stop()
