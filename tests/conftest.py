"""Shared fixtures: the embedded broker and a SparkSession (one each per test session), the broker's
address, and unique names.

``broker`` and ``spark`` start lazily: only sessions that run a test needing them pay for them (the
broker: ~0.1 s start, plus up to ~5 s to stop while clients still hold connections; Spark: 6-15 s).
Set ``BROOK_TEST_BOOTSTRAP_SERVERS`` to run the ``bootstrap``-based tests against another cluster
(e.g. Apache Kafka) instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from streaming.broker import EmbeddedBroker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession



@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """An embedded broker for the whole session (memory storage), stopped at the end."""
    embedded = EmbeddedBroker(workdir=tmp_path_factory.mktemp("broker"))
    embedded.start()
    try:
        yield embedded
    finally:
        embedded.stop()


@pytest.fixture
def bootstrap(request: pytest.FixtureRequest) -> str:
    """``bootstrap.servers`` of the test cluster: ``$BROOK_TEST_BOOTSTRAP_SERVERS`` or the embedded broker."""
    external = os.environ.get("BROOK_TEST_BOOTSTRAP_SERVERS")
    if external:
        return external
    embedded: EmbeddedBroker = request.getfixturevalue("broker")
    return embedded.bootstrap_servers


@pytest.fixture
def unique_name() -> str:
    """A fresh name for topics and application ids, e.g. ``t3f9a1c2b4d``; suffix it per topic."""
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local SparkSession for the whole session (6-15 s to start), with the ``brook-kafka``
    source registered: the platform's Spark conf, on 2 cores with 4 shuffle partitions."""
    from assets.spark.session import local_spark_session

    session = local_spark_session()
    try:
        yield session
    finally:
        session.stop()


_ARTIFACTS = pytest.StashKey[list[str]]()


@pytest.fixture
def record_artifact(request: pytest.FixtureRequest) -> Callable[[Path], None]:
    """Name a file a test leaves for people to look at (a screenshot); printed at the end of the session."""
    def record(path: Path) -> None:
        request.config.stash.setdefault(_ARTIFACTS, []).append(str(path))
    return record


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    for path in config.stash.get(_ARTIFACTS, []):
        terminalreporter.write_line(f"test artifact: {path}")
