"""Several hosts on one Linux machine, for tests: network namespaces on a bridge of the test's own.

:class:`HostNetwork` makes a bridge in the calling (root) namespace with the address ``10.213.X.1/24``
(``X`` chosen so that no address or route of this machine is already in that /24) and ``count`` network
namespaces, each joined to the bridge by a veth pair and given ``10.213.X.11``, ``.12``, ... . Each
namespace is a host: its own loopback, its own ports, reachable from the others and from the root
namespace, nothing else. A server the hosts share (the broker) listens on :attr:`HostNetwork.gateway`,
the bridge's address; a process runs on a host through :meth:`Host.command` (``ip netns exec``).
:meth:`HostNetwork.cut` takes a host's link down (its packets are dropped, as when a machine falls off
the network: no reset, no error, only silence) and :meth:`HostNetwork.restore` brings it back::

    with HostNetwork(3) as network:
        broker = EmbeddedBroker(host=network.gateway, workdir=...)
        worker = subprocess.Popen(network.hosts[0].command(sys.executable, "-m", ...))
        network.cut(network.hosts[0])

The bridge's address is an address of this machine: other machines reach it only if they route
``10.213.X.0/24`` here, so a server bound to it (the embedded broker, which has no authentication) is
as private as the test's namespaces in practice, not by construction.

Names carry the creating process's pid (``brook-<pid>-<n>`` namespaces, ``bk<pid>`` bridge,
``bk<pid>h<n>`` veth ends), so concurrent runs never collide; :meth:`HostNetwork.close` (also on an
exception inside ``with``) deletes everything it made, and set-up first deletes what a killed run of
this module left behind (only names whose pid is no longer alive).

Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2's ``ip``: :func:`unavailable_reason` tries to
make a namespace and a bridge and says why it cannot (tests skip with that message). Processes started
in a namespace must be stopped before :meth:`HostNetwork.close`.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from streaming.broker.embedded import pid_alive

__all__ = ["Host", "HostNetwork", "NetworkSetupError", "remove_leftovers", "run_ip", "unavailable_reason"]

SUBNET_PREFIX = "10.213"
_NAMESPACE = re.compile(r"^brook-(\d+)-(\d+|probe)$")
_LINK = re.compile(r"^bk(\d+)(h\d+|p)?$")


class NetworkSetupError(RuntimeError):
    """An ``ip`` command failed while making or changing the test network (the message has its stderr)."""


def run_ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``ip ARGS`` (iproute2); with ``check``, a non-zero exit raises :class:`NetworkSetupError` with its stderr."""
    ip = shutil.which("ip")
    if ip is None:
        raise NetworkSetupError("the 'ip' command (iproute2) is not installed")
    result = subprocess.run([ip, *args], check=False, capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise NetworkSetupError(f"'ip {' '.join(args)}' failed (exit {result.returncode}): {result.stderr.strip()}")
    return result


def unavailable_reason() -> str | None:
    """Why network namespaces cannot be made here (no ``ip``, not root, no CAP_NET_ADMIN), or None.

    Decided by trying: a namespace and a bridge are created and deleted at once.
    """
    if shutil.which("ip") is None:
        return ("the 'ip' command (iproute2) is not installed; install it as root: apt-get install iproute2 "
                "(.ci/run does)")
    probe = f"brook-{os.getpid()}-probe"
    bridge = f"bk{os.getpid()}p"
    try:
        made = run_ip("netns", "add", probe, check=False)
        if made.returncode != 0:
            return f"cannot create a network namespace (needs root / CAP_SYS_ADMIN): {made.stderr.strip()}"
        linked = run_ip("link", "add", bridge, "type", "bridge", check=False)
        if linked.returncode != 0:
            return f"cannot create a bridge (needs CAP_NET_ADMIN): {linked.stderr.strip()}"
        return None
    finally:
        run_ip("link", "del", bridge, check=False)
        run_ip("netns", "del", probe, check=False)


@dataclass(frozen=True)
class Host:
    """One namespace: its name, its address on the bridge, and the veth end on the bridge (root side)."""

    namespace: str
    address: str
    link: str

    def command(self, *argv: str) -> list[str]:
        """``argv`` run inside this host's namespace (``ip netns exec``, which execs it: same pid)."""
        ip = shutil.which("ip") or "ip"
        return [ip, "netns", "exec", self.namespace, *argv]


def remove_leftovers() -> list[str]:
    """Delete the namespaces and links of earlier runs whose process is gone (a killed test run); their names."""
    removed = []
    for line in run_ip("-o", "link", "show", check=False).stdout.splitlines():
        parts = line.split(":", 2)
        name = parts[1].strip().split("@")[0] if len(parts) > 1 else ""
        match = _LINK.match(name)
        if match and not pid_alive(int(match.group(1))):
            run_ip("link", "del", name, check=False)
            removed.append(name)
    for line in run_ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        match = _NAMESPACE.match(name)
        if match and not pid_alive(int(match.group(1))):
            run_ip("netns", "del", name, check=False)
            removed.append(name)
    return removed


def free_subnet(start: int) -> ipaddress.IPv4Network:
    """A ``10.213.X.0/24`` with no address or route of this machine in it, trying ``X`` from ``start`` on."""
    used = run_ip("-4", "-o", "addr", "show", check=False).stdout + run_ip("-4", "route", "show", "table", "all",
                                                                      check=False).stdout
    for step in range(254):
        third = (start + step) % 254 + 1
        if f"{SUBNET_PREFIX}.{third}." not in used:
            return ipaddress.IPv4Network(f"{SUBNET_PREFIX}.{third}.0/24")
    raise NetworkSetupError(f"every {SUBNET_PREFIX}.X.0/24 is in use on this machine")


class HostNetwork:
    """``count`` network namespaces (hosts) on a bridge in the root namespace; see the module docstring."""

    def __init__(self, count: int = 3) -> None:
        if not 1 <= count <= 9:
            raise ValueError(f"count must be 1-9 hosts, got {count}")
        self.count = count
        pid = os.getpid()
        self.bridge = f"bk{pid}"
        self.subnet: ipaddress.IPv4Network | None = None
        self.hosts: list[Host] = []
        self._namespaces = [f"brook-{pid}-{n}" for n in range(1, count + 1)]
        self._links = [f"bk{pid}h{n}" for n in range(1, count + 1)]

    @property
    def gateway(self) -> str:
        """The bridge's address in the root namespace: where a server every host reaches listens."""
        if self.subnet is None:
            raise NetworkSetupError("the network is not set up: use HostNetwork as a context manager or call open()")
        return str(self.subnet.network_address + 1)

    def open(self) -> Self:
        """Make the bridge and the namespaces; on any failure, delete what was made and raise."""
        remove_leftovers()
        try:
            self.subnet = free_subnet(os.getpid() % 254)
            run_ip("link", "add", self.bridge, "type", "bridge")
            run_ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            run_ip("link", "set", self.bridge, "up")
            for n, (namespace, link) in enumerate(zip(self._namespaces, self._links, strict=True), start=1):
                address = str(self.subnet.network_address + 10 + n)
                run_ip("netns", "add", namespace)
                run_ip("link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", namespace)
                run_ip("link", "set", link, "master", self.bridge, "up")
                run_ip("-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
                run_ip("-n", namespace, "link", "set", "eth0", "up")
                run_ip("-n", namespace, "link", "set", "lo", "up")
                self.hosts.append(Host(namespace, address, link))
        except BaseException:
            self.close()
            raise
        return self

    def cut(self, host: Host) -> None:
        """Take ``host``'s link down: it can reach nothing and nothing reaches it (packets are dropped)."""
        run_ip("link", "set", host.link, "down")

    def restore(self, host: Host) -> None:
        """Bring ``host``'s link back up."""
        run_ip("link", "set", host.link, "up")

    def close(self) -> None:
        """Delete the veth pairs, the namespaces and the bridge (whatever of them exists)."""
        for link in self._links:
            run_ip("link", "del", link, check=False)
        for namespace in self._namespaces:
            run_ip("netns", "del", namespace, check=False)
        run_ip("link", "del", self.bridge, check=False)
        self.hosts = []

    def __enter__(self) -> Self:
        return self.open()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
