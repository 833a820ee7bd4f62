"""TLS for tests: a throwaway certificate authority, and a TLS-terminating proxy in front of a plaintext port.

The embedded broker's own TLS flags do not work (measured with Tansu 0.6.0), so TLS is tested end to end
through Debian's ``stunnel4``: clients speak TLS to :class:`TlsProxy`, which forwards the bytes to the
broker's plaintext port. The broker must advertise the proxy's port in metadata
(``EmbeddedBroker(advertised_port=proxy.port)``), or clients would reconnect past the proxy::

    authority = make_authority(tmp_path / "tls")
    proxy = TlsProxy(authority, workdir=tmp_path / "stunnel")
    with EmbeddedBroker(advertised_port=proxy.port, workdir=...) as broker, proxy.start(broker.port):
        config = {"bootstrap.servers": proxy.bootstrap_servers, **proxy.client_security()}

:func:`make_authority` needs the ``cryptography`` package (a runtime dependency); :class:`TlsProxy` needs the
``stunnel4`` (or ``stunnel``) binary: :func:`stunnel_binary` says why it is missing.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

__all__ = ["Authority", "TlsProxy", "make_authority", "stunnel_binary"]


@dataclass(frozen=True)
class Authority:
    """A CA certificate and a server certificate it signed (PEM files), valid for ``127.0.0.1`` and ``localhost``."""

    ca: Path
    """The CA certificate: what clients trust (``ssl.ca.location``)."""
    certificate: Path
    """The server certificate."""
    key: Path
    """The server certificate's private key (unencrypted)."""


def make_authority(directory: Path, name: str = "brook-test") -> Authority:
    """Write a fresh CA and a server certificate for ``127.0.0.1``/``localhost`` into ``directory``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
              .issuer_name(ca_name).public_key(server_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
              .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                          x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                             critical=False)
              .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
              .sign(ca_key, hashes.SHA256()))
    paths = Authority(directory / "ca.pem", directory / "server.pem", directory / "server.key")
    paths.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths.certificate.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths.key.write_bytes(server_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                   serialization.NoEncryption()))
    paths.key.chmod(0o600)
    return paths


def stunnel_binary() -> str | None:
    """The stunnel executable (Debian's ``stunnel4`` package installs ``stunnel4`` and ``stunnel``), or None."""
    return shutil.which("stunnel4") or shutil.which("stunnel")


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class TlsProxy:
    """stunnel terminating TLS on ``host:port`` (a free port, chosen at construction) for a plaintext port.

    The port is known before the proxy starts, so the broker behind it can advertise it. :meth:`start`
    returns once the proxy accepts connections; :meth:`stop` (or leaving the ``with`` block) ends it.
    """

    def __init__(self, authority: Authority, workdir: Path, host: str = "127.0.0.1", port: int | None = None) -> None:
        self.authority = authority
        self.workdir = workdir
        self.host = host
        self.port = port or _free_port(host)
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` of the TLS side."""
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "stunnel.log"

    def client_security(self) -> dict[str, str]:
        """The client settings that trust this proxy's CA."""
        return {"security.protocol": "SSL", "ssl.ca.location": str(self.authority.ca)}

    def start(self, target_port: int, target_host: str = "127.0.0.1", timeout: float = 10.0) -> Self:
        """Forward TLS connections on :attr:`port` to ``target_host:target_port`` (plaintext)."""
        binary = stunnel_binary()
        if binary is None:
            raise RuntimeError("stunnel is not installed (Debian: apt-get install stunnel4)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "stunnel.conf"
        config.write_text("\n".join([
            "foreground = yes",
            f"output = {self.log_path}",
            "debug = notice",
            "[kafka]",
            f"accept = {self.host}:{self.port}",
            f"connect = {target_host}:{target_port}",
            f"cert = {self.authority.certificate}",
            f"key = {self.authority.key}",
            "",
        ]))
        self._process = subprocess.Popen([binary, str(config)], stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(f"stunnel exited with code {self._process.returncode} at start-up: "
                                   f"{self._log_tail()}")
            with contextlib.suppress(OSError), socket.create_connection((self.host, self.port), timeout=0.2):
                return self
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"stunnel did not listen on {self.bootstrap_servers} within {timeout} s: "
                                   f"{self._log_tail()}")
            time.sleep(0.05)

    def stop(self) -> None:
        """End the proxy (SIGTERM, then SIGKILL after 5 s)."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _log_tail(self) -> str:
        try:
            return " | ".join(self.log_path.read_text(errors="replace").splitlines()[-5:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
