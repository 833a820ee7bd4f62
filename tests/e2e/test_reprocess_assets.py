"""The ``reprocessed/<app>`` assets in the code location, and what they refuse with one line, before Spark starts and
before anything is written: a day with no archive, and a topology with a wall-clock punctuator (naming the
processor)."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import dagster as dg
import yaml

from assets.platform_spec import (
    AppSpec,
    ArchiveSpec,
    ClusterSpec,
    PlatformSpec,
    ReprocessSpec,
    TopicSpec,
    load_platform_spec,
)
from assets.reprocess import reprocess_asset_key, reprocess_assets
from assets.resources import KafkaResource, PlatformResource, SparkResource

DAY = date(2023, 11, 15)


def _materialize(spec: PlatformSpec, tmp_path: Path, app: str) -> str:
    """Materialize ``reprocessed/<app>`` for DAY; the one step failure's message."""
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(spec.model_dump(mode="json")))
    result = dg.materialize(reprocess_assets(spec), selection=[reprocess_asset_key(app)], partition_key=DAY.isoformat(),
                            resources={"kafka": KafkaResource(), "platform": PlatformResource(path=str(path)),
                                       "pyspark": SparkResource(spark_config={})},  # never started: refused before
                            raise_on_error=False)
    [failure] = [event for event in result.all_events if event.is_step_failure]
    return failure.step_failure_data.error.message.strip().removeprefix("dagster._core.definitions.events.Failure: ")


def _spec(tmp_path: Path, **changes: object) -> PlatformSpec:
    spec = load_platform_spec(Path(__file__).resolve().parents[2] / "platform" / "platform.yaml")
    return spec.model_copy(update={
        "archive": ArchiveSpec(location=str(tmp_path / "archive"), start_date=date(2023, 11, 14)),
        "reprocess": ReprocessSpec(location=str(tmp_path / "reprocessed")), "quality": [], **changes})


def test_each_app_is_reprocessed_day_after_day_over_the_archive_of_its_inputs_with_the_quality_rules() -> None:
    from assets.archive.keys import archive_asset_key
    from assets.definitions import defs

    spec = load_platform_spec(Path(__file__).resolve().parents[2] / "platform" / "platform.yaml")
    graph = defs.resolve_asset_graph()
    orders, wordcount = graph.get(reprocess_asset_key("orders")), graph.get(reprocess_asset_key("wordcount"))
    assert orders.parent_keys == {reprocess_asset_key("orders"), *(archive_asset_key(t) for t in ("orders", "users",
                                                                                                    "items"))}
    assert wordcount.parent_keys == {reprocess_asset_key("wordcount"), archive_asset_key("wordcount-lines")}
    assert defs.get_assets_def(orders.key).op.pool == "spark"
    assert orders.partitions_def.get_first_partition_key() == spec.archive.start_date.isoformat()
    checks = {key.name for key in graph.asset_check_keys if key.asset_key == orders.key}
    assert checks == {rule.name for rule in spec.quality if rule.topic in spec.apps["orders"].outputs
                      and rule.check != "freshness"} and checks


def test_a_day_with_no_archive_is_refused_in_one_line_and_nothing_is_written(tmp_path: Path) -> None:
    message = _materialize(_spec(tmp_path), tmp_path, "orders")
    assert message.startswith("reprocessed/orders 2023-11-15: day 2023-11-15 cannot be reprocessed: topic 'items' has "
                              "no archive for 2023-11-15")
    assert message.endswith("materialize archive/items partition 2023-11-15") and "\n" not in message
    assert not (tmp_path / "reprocessed").exists()


def test_a_wall_clock_punctuator_is_refused_naming_the_processor(tmp_path: Path) -> None:
    spec = _spec(tmp_path, topics={"words": TopicSpec(partitions=2, value="string"),
                                   "ticks": TopicSpec(partitions=2, value="string")},
                 apps={"ticker": AppSpec(application_id="ticker", topology="tests.e2e.wall_clock_app:topology",
                                         config="apps/wordcount/config.yaml", inputs=["words"], outputs=["ticks"])},
                 clusters={"embedded": ClusterSpec(bootstrap_servers="127.0.0.1:9092")})
    message = _materialize(spec, tmp_path, "ticker")
    assert message == ("reprocessed/ticker 2023-11-15: processor 'ticker' schedules a wall-clock punctuator (every "
                       "1000 ms), which batch reprocessing cannot fire (it replays archived input: there is no wall "
                       "clock): schedule it on PunctuationType.STREAM_TIME instead")
    assert not (tmp_path / "reprocessed").exists()
