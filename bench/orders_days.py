"""The orders pipeline over generated days, live and in batch: what ``bench/reprocess.py`` runs and compares.

The same approach as ``tests/integration/test_reprocess_equals_live.py`` (its helpers, made to return problems
instead of asserting): ``brook worker run`` processes over the input topics, the platform spec with the archive
and the reprocessing under a directory of the run's own, the archive assets for each day, and each output topic
of the batch runs compared per key with what the workers wrote (``assets.reprocess.compare``, as the test does).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import REPO_ROOT

HOUR_MS, MINUTE_MS = 3_600_000, 60_000
PARTITIONS = 4
APP = "orders"
Row = tuple[bytes | None, bytes | None, int]


def at(day: date, hours: float) -> int:
    """Epoch ms of ``hours`` after midnight UTC of ``day``."""
    return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1000 + hours * HOUR_MS)


def generate_orders(count: int, first_day: date, days: int, tail_hours: float) -> list[Any]:
    """``count`` orders spread evenly from ``first_day`` 00:30 to ``tail_hours`` into the day after the last
    (which day ``days``'s run reads up to its frontier): 10% up to 5 min out of order, 2% 2.5 h late, 5% duplicates,
    5% invalid, as the integration test's; late orders before the first are left out (no day before to archive)."""
    from streaming.testing import generators

    start, end = at(first_day, 0.5), at(first_day + timedelta(days=days), tail_hours)
    orders = generators.orders(count, seed=17, users=2000, items=200, catalog_seed=5, start_ms=start,
                               step_ms=(end - start) // count, out_of_order=0.1, max_disorder_ms=5 * MINUTE_MS,
                               late=0.02, lateness_ms=150 * MINUTE_MS, duplicates=0.05, invalid=0.05)
    return [dataclasses.replace(o, value={**o.value, "order_id": f"b-{o.value['order_id']}"}) for o in orders
            if o.timestamp >= start]


def load_tables(bootstrap: str, first_day: date) -> int:
    """The users and items tables the orders are generated against, at midnight of ``first_day``; returns records."""
    from apps.orders import pipeline
    from streaming.serdes import Serdes
    from streaming.testing import generators
    from streaming.testing.kafka import produce

    users = generators.users(2000, seed=5, start_ms=at(first_day, 0))
    items = generators.items(200, seed=5, start_ms=at(first_day, 0))
    produce(bootstrap, pipeline.USERS_TOPIC, users, Serdes.String(), Serdes.Json())
    produce(bootstrap, pipeline.ITEMS_TOPIC, items, Serdes.String(), Serdes.Json())
    return len(users) + len(items)


def write_platform(workdir: Path, first_day: date) -> Path:
    """The repo's platform spec with the archive under ``workdir`` (starting ``first_day``) and no quality rules;
    returns its path. Each batch run points ``reprocess`` at its own root (:func:`with_reprocess_root`)."""
    import yaml

    from assets.platform_spec import ArchiveSpec, load_platform_spec

    spec = load_platform_spec(REPO_ROOT / "platform" / "platform.yaml").model_copy(update={
        "archive": ArchiveSpec(location=str(workdir / "archive"), start_date=first_day, max_disorder_minutes=15),
        "quality": []})
    path = workdir / "platform.yaml"
    path.write_text(yaml.safe_dump(spec.model_dump(mode="json")))
    return path


def write_spark_conf(workdir: Path) -> Path:
    """The platform's Spark conf with the console progress bars off (they would fill the bench's output)."""
    source = REPO_ROOT / "platform" / "spark" / "spark-defaults.conf"
    path = workdir / "spark-defaults.conf"
    path.write_text(source.read_text() + "\nspark.ui.showConsoleProgress false\n")
    return path


def with_reprocess_root(platform_path: Path, root: Path) -> Any:
    """The platform spec at ``platform_path`` with its reprocessing under ``root``."""
    from assets.platform_spec import ReprocessSpec, load_platform_spec

    return load_platform_spec(platform_path).model_copy(update={"reprocess": ReprocessSpec(location=str(root))})


def archive_days(platform_path: Path, spark_conf: Path, bootstrap: str, topics: list[str], days: list[date]) -> None:
    """Materialize ``archive/<topic>`` for every day through the archive assets (what the integration test does),
    on a Spark session with the settings in ``spark_conf``."""
    import dagster as dg

    from assets.archive.assets import archive_assets
    from assets.archive.keys import archive_asset_key
    from assets.platform_spec import load_platform_spec
    from assets.resources import KafkaResource, PlatformResource, spark_resource

    spec = load_platform_spec(platform_path)
    resources = {"kafka": KafkaResource(bootstrap_servers=bootstrap),
                 "platform": PlatformResource(path=str(platform_path)), "pyspark": spark_resource(spark_conf)}
    for day in days:
        result = dg.materialize(archive_assets(spec), selection=[archive_asset_key(t) for t in topics],
                                partition_key=day.isoformat(), resources=resources,
                                run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})
        if not result.success:
            raise RuntimeError(f"archiving {day} failed")


def read_rows(bootstrap: str, topic: str) -> list[Row]:
    """Every record of ``topic`` as ``(key, value, timestamp)``, read to the end of each partition."""
    from streaming.serdes import Serdes
    from streaming.testing.kafka import read_topic

    return [(r.key, r.value, r.timestamp)
            for r in read_topic(bootstrap, topic, Serdes.Bytes(), Serdes.Bytes(), PARTITIONS, timeout=120)]


def count_by_day(rows: Iterable[Row], days: list[date]) -> list[int]:
    """How many of ``rows`` have a timestamp in each of ``days`` (UTC)."""
    counts = dict.fromkeys(days, 0)
    for _, _, timestamp in rows:
        day = datetime.fromtimestamp(timestamp / 1000, tz=UTC).date()
        if day in counts:
            counts[day] += 1
    return [counts[day] for day in days]
