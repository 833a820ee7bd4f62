"""Shared fixtures: the embedded broker (one per test session), its address, and unique names.

``broker`` starts lazily: only sessions that run a test needing it pay for it (~0.1 s start, plus
up to ~5 s to stop while clients still hold connections). Set ``BROOK_TEST_BOOTSTRAP_SERVERS`` to
run the ``bootstrap``-based tests against another cluster (e.g. Apache Kafka) instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from streaming.broker import EmbeddedBroker


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
