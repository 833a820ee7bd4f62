"""Workers on two network-namespace hosts during a scale (issue 18, item 3): the scaling test's counting app
(``tests/e2e/test_scale_job.py``'s :class:`Scenario`) with one ``brook worker run`` on each of two hosts of the
multi-host harness (:mod:`streaming.testing.netns`; the embedded broker on their bridge).

The workers on both hosts process the input and are stopped; the group is scaled from 2 to 4 partitions through
``scale_counter`` (migrate, on the local Spark session); the workers, started again on both hosts, resume on the new
generation: each host's worker restores its tasks' stores from the scaling's fresh snapshots of the new generation
(never from the old one), and the counts, per-minute windows and join pairs are exactly the oracle's, new input
included (the scaling test's checks).

Needs root (network namespaces, a bridge): skipped with the reason otherwise.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from streaming.broker import EmbeddedBroker
from streaming.testing.netns import Host, HostNetwork
from streaming.testing.workers import start_worker
from tests.e2e.test_scale_job import ROOT, Scenario, scale_and_resume, start
from tests.integration.test_multi_host import bridge_broker, network  # noqa: F401

pytestmark = [pytest.mark.integration, pytest.mark.slow]
LOADED = re.compile(r"store '([\w-]+)': loaded snapshot \w+ of (\S+)\[(\d+)\]")


class HostScenario(Scenario):
    """The scenario with its two workers on two hosts (worker ``i`` on ``hosts[i]``)."""

    hosts: list[Host]

    def start_workers(self, workdir: Path) -> list[subprocess.Popen[bytes]]:
        return [start_worker(self.bootstrap, "tests.integration.workloads.scaling_app:topology", self.config, workdir,
                             i, ROOT, prefix=host.command()) for i, host in enumerate(self.hosts)]


def test_workers_on_two_hosts_resume_on_the_new_generation_after_a_scale(
        network: HostNetwork, bridge_broker: EmbeddedBroker, unique_name: str,  # noqa: F811
        tmp_path: Path, spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    s = start(bridge_broker.bootstrap_servers, unique_name, tmp_path, monkeypatch, scenario=HostScenario)
    assert isinstance(s, HostScenario)
    s.hosts = network.hosts[:2]
    s.produce(0, 400)
    s.process()
    s.check()
    scale_and_resume(s, 4, 2, spark)
    app = s.spec().apps["counter"]
    new_changelogs = {app.physical_changelog(store) for store in ("counts", "per-minute", "seen-this-join-store",
                                                                  "seen-other-join-store")}
    workdir = tmp_path / f"workers-4-{len(s.produced[s.clicks])}"
    for i, host in enumerate(s.hosts):
        loaded = {(store, topic, int(p)) for store, topic, p in
                  LOADED.findall((workdir / f"worker-{i}.log").read_text(errors="replace"))}
        assert loaded, f"the worker on {host.address} restored nothing from the new snapshots"
        assert {topic for _, topic, _ in loaded} <= new_changelogs, loaded
