"""Shared fixtures: the embedded broker and a SparkSession (one each per test session), the broker's
address, and unique names; per test module, a Spark standalone cluster with a session on it, a PostgreSQL
server (the tests of Brook on real clusters, platform/runbooks/deploy.md) and a MariaDB server (the database
sink's tests).

``broker`` and ``spark`` start lazily: only sessions that run a test needing them pay for them (the
broker: ~0.1 s start, plus up to ~5 s to stop while clients still hold connections; Spark: 6-15 s).
A module on the Spark cluster stops the local session (one SparkContext per process); the next test that
asks for ``spark`` starts it again. Set ``BROOK_TEST_BOOTSTRAP_SERVERS`` to run the ``bootstrap``-based tests
against another cluster (e.g. Apache Kafka) instead.

``make test`` runs the suite on two pytest-xdist workers (``-n 2 --dist loadgroup``): each worker is its own
test session, with its own broker and SparkSession (its own ports and temporary directories). The files of
:data:`XDIST_GROUPS` that must not run at the same time as each other share a group, which keeps them on one
worker, one after the other.
"""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from streaming.broker import EmbeddedBroker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streaming.testing.mariadb import MariaDBServer
    from streaming.testing.postgres import PostgresServer
    from streaming.testing.spark_cluster import SparkStandaloneCluster

ROOT = Path(__file__).resolve().parents[1]

# The orders pipeline encrypts with the key in $BROOK_ORDERS_KEY_K1 (apps/orders/encryption.yaml) and writes the
# user profiles to $BROOK_ORDERS_DATABASE_URL (apps/orders/profiles.py): one random key and one SQLite file per
# test session, inherited by the workers, brokers, Spark and Dagster processes the tests start.
from apps.orders.profiles import DATABASE_URL_VARIABLE
from apps.orders.protection import ensure_key

ensure_key()
if not os.environ.get(DATABASE_URL_VARIABLE):
    os.environ[DATABASE_URL_VARIABLE] = f"sqlite:///{tempfile.mkdtemp(prefix='brook-test-profiles-')}/profiles.db"

#: Test files whose tests run on one pytest-xdist worker, one after the other, by group (``--dist loadgroup``).
XDIST_GROUPS: dict[str, str] = {
    # Spark: one JVM at a time on 2 cores (the ``spark`` fixture's, or the Dagster CLI's in a subprocess)
    "tests/e2e/test_compaction.py": "spark",
    "tests/e2e/test_cli_materialize.py": "spark",
    "tests/integration/test_archive.py": "spark",
    "tests/integration/test_kafka_source.py": "spark",
    "tests/integration/test_reprocess_spark.py": "spark",
    "tests/integration/test_reprocess_equals_live.py": "spark",
    "tests/e2e/test_spark_standalone.py": "spark",  # a standalone cluster's JVMs, and a session on it
    "tests/e2e/test_sensors_daemon.py": "spark",  # the daemon's compaction run starts a local Spark
    # the fault-injection runs: several worker processes each, SIGKILLed on a schedule, with short session
    # timeouts; two of them at once on 2 cores would starve each other's heartbeats
    "tests/integration/test_fault_injection.py": "faults",
    "tests/integration/test_exactly_once_faults.py": "faults",
    "tests/integration/test_broker_bounce.py": "faults",
    # network namespaces: each picks a free 10.213.X.0/24 by looking at the machine's routes, which two
    # workers doing it at the same instant could both pick
    "tests/unit/test_netns.py": "netns",
    "tests/integration/test_multi_host.py": "netns",
}


class XdistGroups:
    """A pytest-xdist plugin: ``--dist loadgroup`` that also groups the files of :data:`XDIST_GROUPS`.

    With pytest 9.2, pytest-xdist's own ``xdist_group`` marks group nothing (pytest-xdist 3.8 passes the group
    in the test's node id, which pytest no longer lets it change: pytest-dev/pytest-xdist#1386), so the
    groups are given to the scheduler here, by file. Work goes out largest group first, then test by test in
    collection order (e2e and integration before the many short unit tests, which fill the end).
    """

    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        if config.getvalue("dist") != "loadgroup":
            return None
        from xdist.scheduler import LoadGroupScheduling

        class FileGroupScheduling(LoadGroupScheduling):
            def _split_scope(self, nodeid: str) -> str:
                return XDIST_GROUPS.get(nodeid.split("::", 1)[0]) or super()._split_scope(nodeid)

        return FileGroupScheduling(config, log)


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistGroups(), "brook-xdist-groups")
    if hasattr(config, "workerinput"):  # this process is a pytest-xdist worker
        main = sys.modules["__main__"]
        # Its __main__ is execnet's bootstrap, as for `python -c`: no __spec__, no __file__. pyspark.sql.connect
        # takes that for a doctest run and, without Spark Connect's dependencies (grpc), calls sys.exit(0) when
        # imported, which great_expectations' import (it probes pyspark.sql.connect) raises as SystemExit.
        # Name the module the worker runs as __main__'s file.
        if getattr(main, "__spec__", None) is None and not hasattr(main, "__file__"):
            import xdist.remote

            main.__file__ = xdist.remote.__file__


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


def _stop_spark() -> None:
    """Stop the process's SparkSession, if one runs, whichever thread started it (one SparkContext per process)."""
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql import SparkSession

    try:
        SparkSession.active().stop()
    except PySparkRuntimeError:  # NO_ACTIVE_OR_DEFAULT_SESSION
        pass


@pytest.fixture(scope="session")
def _spark_stopped_at_end() -> Iterator[None]:
    """Stops the process's SparkSession, if one is running, at the end of the test session."""
    yield
    _stop_spark()


@pytest.fixture
def spark(_spark_stopped_at_end: None) -> SparkSession:
    """The process's local SparkSession (6-15 s to start the first time, then reused), with the ``brook-kafka``
    source registered: the platform's Spark conf, on 2 cores with 4 shuffle partitions. Started again after a
    module that stopped it (:func:`spark_cluster_session` runs its own session on a cluster)."""
    from assets.spark.session import local_spark_session

    return local_spark_session()


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandaloneCluster]:
    """A Spark standalone cluster for the module: a master and two workers of one core and 1 GB each, started
    with pyspark's ``spark-class`` (streaming.testing.spark_cluster), every JVM stopped at the end."""
    from streaming.testing.spark_cluster import SparkStandaloneCluster, java_missing

    missing = java_missing()
    if missing:
        pytest.skip(f"Spark standalone cluster: {missing}")
    with SparkStandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def spark_cluster_session(spark_cluster: SparkStandaloneCluster,
                          tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """The platform's SparkSession on :func:`spark_cluster`, made as a deployment makes it (platform/runbooks/deploy.md):
    ``BROOK_SPARK_CONF`` names the platform's conf plus the executors' size and ``spark.submit.pyFiles`` (Brook's
    code zipped with ``python -m zipfile``), ``BROOK_SPARK_MASTER`` the master; the session comes from the Dagster
    resource (``assets.resources.spark_resource``). The process's local session is stopped first (one
    SparkContext per process) and this one at the end of the module."""
    from assets.resources import SPARK_CONF_ENV_VAR, SPARK_MASTER_ENV_VAR, spark_resource
    from streaming.testing.spark_cluster import code_archive

    workdir = tmp_path_factory.mktemp("spark-session")
    conf = workdir / "spark-defaults.conf"
    conf.write_text((ROOT / "platform" / "spark" / "spark-defaults.conf").read_text()
                    + f"spark.executor.memory 512m\nspark.executor.cores 1\n"
                      f"spark.submit.pyFiles {code_archive(ROOT, workdir / 'brook-code.zip')}\n")
    _stop_spark()
    with pytest.MonkeyPatch.context() as env:
        env.setenv(SPARK_CONF_ENV_VAR, str(conf))
        env.setenv(SPARK_MASTER_ENV_VAR, spark_cluster.master_url)
        session = spark_resource().spark_session
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL server for the module (Debian's ``postgresql``; streaming.testing.postgres), stopped
    and removed at the end."""
    from streaming.testing.postgres import PostgresServer, postgres_missing

    missing = postgres_missing()
    if missing:
        pytest.skip(f"PostgreSQL server: {missing}")
    with PostgresServer() as server:
        yield server


@pytest.fixture(scope="module")
def mariadb() -> Iterator[MariaDBServer]:
    """A throwaway MariaDB server for the module (Debian's ``mariadb-server``; streaming.testing.mariadb), stopped
    and removed at the end."""
    from streaming.testing.mariadb import MariaDBServer, mariadb_missing

    missing = mariadb_missing()
    if missing:
        pytest.skip(f"MariaDB server: {missing}")
    with MariaDBServer() as server:
        yield server


@pytest.fixture
def database_url(request: pytest.FixtureRequest, tmp_path: Path, unique_name: str) -> str:
    """A SQLAlchemy URL of a new, empty database on the backend the test is parametrized with (indirectly:
    ``sqlite`` — a file —, ``mariadb`` or ``postgres``, on the module's throwaway server)."""
    backend = request.param
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'sink.db'}"
    if backend == "mariadb":
        return request.getfixturevalue("mariadb").create_database(unique_name)
    if backend == "postgres":
        server = request.getfixturevalue("postgres")
        server.client("createdb", unique_name)
        return server.url(unique_name).replace("+psycopg2", "+psycopg")
    raise ValueError(f"no database backend {backend!r}")


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
