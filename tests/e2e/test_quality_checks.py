"""The quality checks (real Great Expectations, in-process Dagster) on archived days written with pyarrow.

The archive days are written in the archive's own layout and schema by small stand-in assets keyed
``archive/<topic>`` (the real archive asset needs Kafka and Spark and has its own test); the checks
under test are the ones the code location builds from the repo's platform.yaml.
"""


from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from assets.archive.keys import archive_asset_key, archive_partitions, partition_day
from assets.archive.layout import UNDECODABLE_DIR
from assets.archive.schema import arrow_schema
from assets.archive.writer import publish_day, staging_dir
from assets.platform_spec import PlatformSpec, load_platform_spec
from assets.quality import quality_checks, undecodable_checks
from assets.reprocess import reprocess_asset_key, reprocess_checks
from assets.resources import PlatformResource

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DAY = date(2023, 11, 14)
DAY_MS = int(datetime(2023, 11, 14, tzinfo=UTC).timestamp() * 1000)


@pytest.fixture
def spec_path(tmp_path: Path) -> Path:
    """The repo's platform.yaml with the archive under ``tmp_path``."""
    raw = yaml.safe_load((ROOT / "platform" / "platform.yaml").read_text())
    raw["archive"]["location"] = str(tmp_path / "archive")
    raw["reprocess"]["location"] = str(tmp_path / "reprocessed")
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _materialize(spec_path: Path, assets: list[Any]) -> dg.ExecuteInProcessResult:
    """The assets and every quality check, for DAY, with the spec as the ``platform`` resource."""
    return dg.materialize([*assets, *quality_checks(load_platform_spec(spec_path))], partition_key=DAY.isoformat(),
                          resources={"platform": PlatformResource(path=str(spec_path))}, raise_on_error=False)


def _write_day(spec: PlatformSpec, topic: str, day: date, rows: list[dict[str, Any]],
               undecodable: list[bytes] = (), root: Path | None = None) -> None:
    """Rows (value fields, key, extra_fields) as an archive day of ``topic`` (under ``root``, default the archive);
    partition/offset/time filled in; ``undecodable`` raw values under ``_undecodable/`` as the archive writes them
    (offsets after the rows')."""
    schema = arrow_schema(spec.topics[topic])
    records = []
    for offset, row in enumerate(rows):
        base = {name: None for name in schema.names}
        base.update(topic=topic, partition=offset % 2, offset=offset // 2,
                    timestamp=datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(minutes=offset))
        base.update(row)
        records.append(base)
    table = pa.Table.from_pylist(records, schema=schema)
    root = root or spec.archive.root()
    staging = staging_dir(root, topic, day)
    staging.mkdir()
    pq.write_table(table, staging / "part-0.parquet")
    if undecodable:
        (staging / UNDECODABLE_DIR).mkdir()
        base = len(rows)
        pq.write_table(pa.Table.from_pylist([
            {"topic": topic, "partition": (base + i) % 2, "offset": (base + i) // 2,
             "timestamp": datetime(day.year, day.month, day.day, tzinfo=UTC), "key": b"user-0", "value": value,
             "error": "value: field 'qty' should be long, got str 'three'"} for i, value in enumerate(undecodable)]),
            staging / UNDECODABLE_DIR / "part-0.parquet")
    publish_day(staging, root, topic, day, {"topic": topic, "rows": len(rows)})


def _stand_in(spec: PlatformSpec, topic: str, rows: list[dict[str, Any]],
              undecodable: list[bytes] = ()) -> dg.AssetsDefinition:
    @dg.asset(key=archive_asset_key(topic), partitions_def=archive_partitions(spec.archive))
    def archive(context: dg.AssetExecutionContext) -> None:
        _write_day(spec, topic, partition_day(context.partition_key), rows, undecodable)

    return archive


ENCRYPTED = "enc:v1:k1:" + "QUJD" * 12  # the wire form of an encrypted field (streaming.encryption)


def _line(order: int, item: str, qty: int = 1, **overrides: Any) -> dict[str, Any]:
    row = {"key": f"user-{order % 3}", "order_id": f"o-{order:08d}", "user": f"user-{order % 3}",
           "region": "eu", "item": item, "qty": qty, "price": 2.5, "ts": DAY_MS + order * 1000,
           "address": ENCRYPTED, "phone": ENCRYPTED}
    row.update(overrides)
    return row


def _good_archives() -> dict[str, list[dict[str, Any]]]:
    orders = [{"key": f"user-{i % 3}", "order_id": f"o-{i:08d}", "user": f"user-{i % 3}", "amount": 2.5,
               "items": '[{"item":"item-001","qty":1,"price":2.5}]', "region": "eu", "card_number": "4111",
               "ts": DAY_MS + i * 1000} for i in range(10)]
    rejected = [{"key": "user-0", "order": '{"order_id":"o-00000008"}', "reason": "no items"},
                {"key": "user-1", "order": '{"order_id":"o-00000009"}', "reason": "bad amount"}]
    lines = [_line(i, "item-001") for i in range(8)] + [_line(0, "item-002", qty=3)]
    counts = [{"key": word, "value": count} for word, count in (("brook", 3), ("stream", 1), ("kafka", 2))]
    hourly = [{"key": region, "region": region, "window_start": DAY_MS + hour * 3_600_000,
               "window_end": DAY_MS + (hour + 1) * 3_600_000, "users": 2, "lines": 3}
              for region in ("eu", "us") for hour in range(2)]
    profiles = [{"key": f"user-{i}", "orders": 2, "total_spent": 5.0, "last_order_ts": DAY_MS + i * 1000,
                 "items_per_category": '{"home": 2}', "version": 2} for i in range(3)]
    return {"orders": orders, "orders-rejected": rejected, "order-lines": lines, "wordcount-counts": counts,
            "local-buyers-hourly": hourly, "user-profiles": profiles}


def _stand_ins(spec_path: Path, archives: dict[str, list[dict[str, Any]]]) -> list[dg.AssetsDefinition]:
    spec = load_platform_spec(spec_path)
    return [_stand_in(spec, topic, rows) for topic, rows in archives.items()]


def _run(spec_path: Path, archives: dict[str, list[dict[str, Any]]]) -> dg.ExecuteInProcessResult:
    return _materialize(spec_path, _stand_ins(spec_path, archives))


def _evaluations(result: dg.ExecuteInProcessResult) -> dict[str, dg.AssetCheckEvaluation]:
    return {evaluation.check_name: evaluation for evaluation in result.get_asset_check_evaluations()}


def _value(evaluation: dg.AssetCheckEvaluation, key: str) -> Any:
    return evaluation.metadata[key].value


def test_checks_pass_on_good_output(spec_path: Path) -> None:
    result = _run(spec_path, _good_archives())
    evaluations = _evaluations(result)
    assert result.success
    assert set(evaluations) == {rule.name for rule in load_platform_spec(spec_path).quality}
    failed = {name: e.description for name, e in evaluations.items() if not e.passed}
    assert failed == {}
    lines = evaluations["order_lines_complete"]
    assert _value(lines, "rows") == 9
    assert _value(lines, "failing not_null(order_id)") == 0
    assert _value(lines, "day") == DAY.isoformat()
    # Partitioned as the archive: every evaluation carries its day's partition key (the UI shows it per day).
    assert {e.partition for e in evaluations.values()} == {DAY.isoformat()}
    coverage = evaluations["order_lines_cover_valid_orders"]
    assert _value(coverage, "baseline rows") == {"orders": 10, "orders-rejected": 2}
    assert _value(coverage, "expected rows") == "[8, 32]"
    assert _value(coverage, "observed row_count") == 9


def test_checks_fail_with_failing_counts_and_samples_on_bad_rows(spec_path: Path) -> None:
    archives = _good_archives()
    archives["order-lines"] = [
        _line(0, "item-001"),
        _line(1, "item-001", order_id=None),                        # not_null(order_id)
        _line(2, "item-001", qty=0),                                 # range(qty)
        _line(3, "item-001", qty=-2, region=None),                   # range(qty), not_null(region)
        _line(4, "item-001", extra_fields=[("card_number", '"4111111111111111"')]),  # absent(card_number)
        _line(5, "item-001", phone="+1-555-0042-007"),              # absent(phone): in clear
        _line(5, "item-001"),                                        # unique(order_id, item)
    ]  # 7 lines for 8 valid orders: row_count below its bound
    archives["orders-rejected"][1]["reason"] = None
    archives["wordcount-counts"].append({"key": "river", "value": 0})

    result = _run(spec_path, archives)
    evaluations = _evaluations(result)
    assert not result.success  # blocking ERROR checks failed

    complete = evaluations["order_lines_complete"]
    assert not complete.passed and complete.severity == dg.AssetCheckSeverity.ERROR
    assert _value(complete, "failing not_null(order_id)") == 1
    assert _value(complete, "failing not_null(region)") == 1
    assert _value(complete, "failing not_null(item)") == 0
    assert _value(complete, "sample not_null(order_id)") == [{"order_id": None, "partition": 1, "offset": 0}]
    assert _value(complete, "failing_expectations") == 2

    quantity = evaluations["order_lines_positive_quantity"]
    assert not quantity.passed and _value(quantity, "failing range(qty)") == 2
    assert {row["qty"] for row in _value(quantity, "sample range(qty)")} == {0, -2}

    card = evaluations["order_lines_card_never_output"]
    assert not card.passed and _value(card, "failing absent(card_number)") == 1
    assert _value(card, "sample absent(card_number)") == [{"partition": 0, "offset": 2}]  # where, not the number
    assert "4111111111111111" not in str(card.metadata)
    contact = evaluations["order_lines_contact_encrypted"]  # encrypted values pass, a clear one fails
    assert not contact.passed and _value(contact, "failing absent(phone)") == 1
    assert _value(contact, "failing absent(address)") == 0
    assert "0042" not in str(contact.metadata)

    unique = evaluations["order_lines_unique_per_order"]
    assert not unique.passed and unique.severity == dg.AssetCheckSeverity.WARN
    assert _value(unique, "failing unique(order_id, item)") == 2

    coverage = evaluations["order_lines_cover_valid_orders"]
    assert not coverage.passed and _value(coverage, "observed row_count") == 7
    assert "row_count: observed 7" in coverage.description

    reason = evaluations["rejected_orders_have_reason"]
    assert not reason.passed and reason.severity == dg.AssetCheckSeverity.WARN
    assert _value(reason, "failing not_null(reason)") == 1

    counts = evaluations["word_counts_positive"]
    assert not counts.passed and _value(counts, "failing range(value)") == 1
    assert evaluations["word_counts_fresh"].passed


def test_blocking_check_stops_downstream_assets(spec_path: Path) -> None:
    archives = _good_archives()
    archives["order-lines"][0]["qty"] = 0
    downstream_ran: list[bool] = []

    partitions = archive_partitions(load_platform_spec(spec_path).archive)

    @dg.asset(deps=[archive_asset_key("order-lines")], partitions_def=partitions)
    def report() -> None:
        downstream_ran.append(True)

    result = _materialize(spec_path, [*_stand_ins(spec_path, archives), report])
    assert not result.success
    assert not _evaluations(result)["order_lines_positive_quantity"].passed
    assert downstream_ran == []


def test_check_without_an_archived_day_fails_naming_the_path(spec_path: Path) -> None:
    archives = _good_archives()
    del archives["orders-rejected"]  # the row_count baseline_minus archive is missing

    partitions = archive_partitions(load_platform_spec(spec_path).archive)

    @dg.asset(key=archive_asset_key("orders-rejected"), partitions_def=partitions)
    def not_written() -> None:
        return None

    result = _materialize(spec_path, [*_stand_ins(spec_path, archives), not_written])
    failures = [event for event in result.all_events if event.event_type_value == "STEP_FAILURE"]
    messages = " ".join(str(event.step_failure_data.error.message) for event in failures)
    assert "order_lines_cover_valid_orders" in messages
    assert "orders-rejected/date=2023-11-14 does not exist" in messages


def test_check_run_on_its_own_checks_its_partition(spec_path: Path) -> None:
    instance = dg.DagsterInstance.ephemeral()
    stand_ins = _stand_ins(spec_path, _good_archives())
    platform = {"platform": PlatformResource(path=str(spec_path))}
    checks = quality_checks(load_platform_spec(spec_path))
    assert dg.materialize(stand_ins, partition_key=DAY.isoformat(), instance=instance, resources=platform).success

    # As the UI's "Execute check" on a day does: the check alone, with its partition (the run's partition tag:
    # dg.materialize's partition_key looks for a partitioned asset among the selected ones, and there is none).
    result = dg.materialize([*stand_ins, *checks], instance=instance, resources=platform,
                            tags={"dagster/partition": DAY.isoformat()},
                            selection=dg.AssetSelection.checks(dg.AssetCheckKey(archive_asset_key("order-lines"),
                                                                                "order_lines_complete")))
    [evaluation] = result.get_asset_check_evaluations()
    assert evaluation.passed and _value(evaluation, "day") == DAY.isoformat() and evaluation.partition == DAY.isoformat()


def test_absent_sees_a_leaked_field_in_undecodable_records_and_they_are_counted(spec_path: Path) -> None:
    """Issue 16, item 16: a record carrying card_number and a mistyped declared field goes to _undecodable/;
    absent(card_number) must still fail on it, and a check of its own counts the undecodable records."""
    spec = load_platform_spec(spec_path)
    leaked = b'{"order_id": "o-00000009", "qty": "three", "card_number": "4111111111111111"}'
    broken = b'{"order_id": "o-00000010", "card_number": "4111111111111111", '  # cut off: not JSON at all
    harmless = b'{"order_id": "o-00000011", "qty": "two", "card_number": null}'
    lines = [_line(i, "item-001") for i in range(8)]
    stand_ins = [_stand_in(spec, topic, rows) for topic, rows in _good_archives().items() if topic != "order-lines"]
    stand_ins.append(_stand_in(spec, "order-lines", lines, undecodable=[leaked, broken, harmless]))
    decodable = [c for c in undecodable_checks(spec)
                 if next(iter(c.check_keys)).asset_key in {archive_asset_key(t) for t in _good_archives()}]
    result = dg.materialize([*stand_ins, *quality_checks(spec), *decodable], partition_key=DAY.isoformat(),
                            resources={"platform": PlatformResource(path=str(spec_path))}, raise_on_error=False)
    evaluations = {(e.asset_key.path[-1], e.check_name): e for e in result.get_asset_check_evaluations()}

    card = evaluations[("order-lines", "order_lines_card_never_output")]
    assert not card.passed and _value(card, "failing absent(card_number)") == 2
    assert _value(card, "sample absent(card_number)") == [{"partition": 0, "offset": 4}, {"partition": 1, "offset": 4}]
    assert _value(card, "undecodable rows checked") == 3
    assert "4111111111111111" not in str(card.metadata) and "4111111111111111" not in card.description

    counted = evaluations[("order-lines", "decodable")]
    assert not counted.passed and counted.severity == dg.AssetCheckSeverity.WARN
    assert _value(counted, "undecodable_rows") == 3
    assert [(r["partition"], r["offset"]) for r in _value(counted, "sample undecodable_rows")] == [(0, 4), (1, 4), (0, 5)]
    assert all(evaluations[(topic, "decodable")].passed for topic in _good_archives() if topic != "order-lines")
    assert evaluations[("order-lines", "order_lines_complete")].passed, "rules on values see decoded rows only"


def test_the_rules_on_an_apps_outputs_check_its_reprocessed_days(spec_path: Path) -> None:
    """``reprocessed/orders`` gets the rules on the orders app's outputs (freshness excepted), reading its outputs'
    days under the reprocess location and a row count's input baseline in the archive."""
    spec = load_platform_spec(spec_path)
    good = _good_archives()
    reprocessed = {topic: rows for topic, rows in good.items() if topic in spec.apps["orders"].outputs}
    midnight = datetime(DAY.year, DAY.month, DAY.day, tzinfo=UTC)
    carried, *lines = reprocessed["order-lines"]
    # The day is the rows timestamped in it: one the run of the day before wrote (it read up to this day's
    # frontier) counts, one of the next day this day's run wrote does not, nor one of the day before.
    reprocessed["order-lines"] = [*lines, _line(9, "item-003", qty=0),  # only the batch's
                                  *(_line(n, "item-001", timestamp=midnight + timedelta(days=1, minutes=n))
                                    for n in (50, 51))]
    day_before = [_line(60, "item-001"), {**carried, "timestamp": midnight + timedelta(minutes=10)}]
    partitions = archive_partitions(spec.archive)

    @dg.asset(key=reprocess_asset_key("orders"), partitions_def=partitions)
    def orders_reprocessed(context: dg.AssetExecutionContext) -> None:
        day, root = partition_day(context.partition_key), spec.reprocess.root() / "orders"
        for topic, rows in reprocessed.items():
            _write_day(spec, topic, day, rows, root=root)
        _write_day(spec, "order-lines", day - timedelta(days=1), day_before, root=root)

    result = dg.materialize([_stand_in(spec, "orders", good["orders"]), orders_reprocessed, *reprocess_checks(spec)],
                            partition_key=DAY.isoformat(), resources={"platform": PlatformResource(path=str(spec_path))},
                            raise_on_error=False)
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert {e.asset_key for e in result.get_asset_check_evaluations()} == {reprocess_asset_key("orders")}
    assert set(evaluations) == {rule.name for rule in spec.quality if rule.topic in spec.apps["orders"].outputs}
    assert {name for name, e in evaluations.items() if not e.passed} == {"order_lines_positive_quantity"}
    assert _value(evaluations["order_lines_positive_quantity"], "failing range(qty)") == 1
    coverage = evaluations["order_lines_cover_valid_orders"]
    assert _value(coverage, "baseline rows") == {"orders": 10, "orders-rejected": 2}  # the reprocessed rejections
    assert _value(coverage, "observed row_count") == 10
