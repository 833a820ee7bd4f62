"""streaming.testing.netns: hosts reach each other and the bridge, a cut host reaches nothing until restored,
and nothing is left behind (after an exception too, and after a killed run). Needs root; skipped otherwise."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading

import pytest

from streaming.testing.netns import HostNetwork, remove_leftovers, run_ip, unavailable_reason

REASON = unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"network namespaces cannot be made here: {REASON}")

CONNECT = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1).close()"


def names(pid: int) -> list[str]:
    """The links and namespaces named for ``pid`` (``bk<pid>``, ``bk<pid>h<n>``, ``brook-<pid>-<n>``)."""
    links = [line.split(":")[1].strip().split("@")[0] for line in run_ip("-o", "link", "show").stdout.splitlines()]
    namespaces = [line.split()[0] for line in run_ip("netns", "list").stdout.splitlines() if line.strip()]
    return sorted(name for name in links + namespaces if re.fullmatch(rf"bk{pid}(h\d+)?|brook-{pid}-\d+", name))


def reaches(network: HostNetwork, index: int, address: str, port: int) -> bool:
    run = subprocess.run(network.hosts[index].command(sys.executable, "-c", CONNECT, address, str(port)),
                         check=False, capture_output=True, timeout=30)
    return run.returncode == 0


def test_hosts_reach_the_bridge_and_each_other_and_a_cut_host_reaches_nothing() -> None:
    with HostNetwork(2) as network, socket.socket() as server:
        server.bind((network.gateway, 0))
        server.listen()
        port = server.getsockname()[1]
        threading.Thread(target=lambda: [server.accept()[0].close() for _ in range(3)], daemon=True).start()
        assert [h.address for h in network.hosts] == [str(network.subnet.network_address + n) for n in (11, 12)]
        assert reaches(network, 0, network.gateway, port) and reaches(network, 1, network.gateway, port)
        listener = subprocess.Popen(network.hosts[1].command(
            sys.executable, "-c", "import socket, sys; s = socket.create_server((sys.argv[1], 7070)); "
            "print('up', flush=True); s.accept()[0].close()", network.hosts[1].address),
            stdout=subprocess.PIPE, text=True)
        try:
            assert listener.stdout is not None and listener.stdout.readline().strip() == "up"
            network.cut(network.hosts[0])
            assert not reaches(network, 0, network.gateway, port)
            network.restore(network.hosts[0])
            assert reaches(network, 0, network.hosts[1].address, 7070)  # host to host, across the bridge
        finally:
            listener.kill()
            listener.wait(10)
        assert reaches(network, 1, network.gateway, port)
    assert names(os.getpid()) == []


def test_everything_is_deleted_after_an_exception_and_leftovers_of_dead_runs_are_removed() -> None:
    with pytest.raises(RuntimeError, match="boom"), HostNetwork(2) as network:
        assert names(os.getpid()) == sorted([network.bridge, *(h.link for h in network.hosts),
                                              *(h.namespace for h in network.hosts)])
        raise RuntimeError("boom")
    assert names(os.getpid()) == []
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    run_ip("netns", "add", f"brook-{dead.pid}-1")
    run_ip("link", "add", f"bk{dead.pid}", "type", "bridge")
    try:
        assert sorted(remove_leftovers()) == sorted([f"bk{dead.pid}", f"brook-{dead.pid}-1"])
    finally:
        run_ip("netns", "del", f"brook-{dead.pid}-1", check=False)
        run_ip("link", "del", f"bk{dead.pid}", check=False)
    assert names(dead.pid) == []
