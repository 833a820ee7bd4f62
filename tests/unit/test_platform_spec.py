"""Topic formats, archive columns and quality rules of the platform spec (the model alone, no Dagster)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from assets.platform_spec import ArchiveSpec, ClusterSpec, PlatformSpec, QualityRule, ReprocessSpec, TopicSpec


def test_json_topic_columns_are_key_fields_extra_and_metadata() -> None:
    topic = TopicSpec(partitions=2, key="string", value="json", fields={"order_id": "string", "qty": "long"})
    assert topic.columns() == {"key": "string", "order_id": "string", "qty": "long", "extra_fields": "map",
                               "topic": "string", "partition": "integer", "offset": "long",
                               "timestamp": "timestamp"}


def test_scalar_topic_has_a_value_column_and_untyped_fields_are_json() -> None:
    assert TopicSpec(partitions=1, value="long").columns()["value"] == "long"
    assert TopicSpec(partitions=1, fields=["a", "b"]).fields == {"a": "json", "b": "json"}
    assert TopicSpec(partitions=1, fields={"a": None, "b": "double"}).fields == {"a": "json", "b": "double"}


@pytest.mark.parametrize(
    ("topic", "message"),
    [
        ({"value": "string", "fields": ["a"]}, "fields are declared for JSON values only"),
        ({"fields": {"offset": "long"}}, "clash with archive columns"),
        ({"value": "avro"}, "Input should be"),
        ({"fields": {"a": "decimal"}}, "Input should be"),
    ],
)
def test_bad_topic_formats_are_rejected(topic: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        TopicSpec(partitions=1, **topic)


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({"check": "not_null", "columns": ["a"], "min": 1}, r"\['min'\] do not apply to check 'not_null'"),
        ({"check": "row_count", "min_ratio": 1}, "needs baseline"),
        ({"check": "row_count", "baseline": "t"}, "needs min_ratio and/or max_ratio"),
        ({"check": "row_count", "baseline": "t", "min_ratio": 2, "max_ratio": 1}, "min_ratio 2.0 is above"),
        ({"check": "range", "columns": ["a"], "min": 5, "max": 1}, "min 5.0 is above max 1.0"),
        ({"check": "freshness", "max_age_minutes": 5, "columns": ["a", "b"]}, "at most one column"),
        ({"check": "unique"}, "needs columns"),
    ],
)
def test_rule_arguments_must_fit_the_check(rule: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        QualityRule(name="r", topic="t", **rule)


def test_rule_columns_are_checked_against_the_topic() -> None:
    topics = {"t": TopicSpec(partitions=1, fields={"qty": "long", "region": "string"})}

    def problems(**rule: Any) -> list[str]:
        return QualityRule(name="r", topic="t", **rule).column_problems(topics)

    assert problems(check="range", columns=["qty"], min=1) == []
    assert problems(check="unique", columns=["region", "partition", "offset"]) == []
    assert problems(check="absent", columns=["card_number"]) == []
    assert problems(check="freshness", max_age_minutes=5) == []
    assert "has no column 'qtty'" in problems(check="not_null", columns=["qtty"])[0]
    assert "range needs a numeric column" in problems(check="range", columns=["region"], max=3)[0]
    assert "absent checks a string column" in problems(check="absent", columns=["qty"])[0]
    assert problems(check="absent", columns=["region"]) == []  # a declared string: never in clear
    assert "freshness needs the timestamp" in problems(check="freshness", columns=["region"], max_age_minutes=1)[0]
    assert "baseline topic 'u' is not declared" in problems(check="row_count", baseline="u", min_ratio=1)[0]
    topics["scalar"] = TopicSpec(partitions=1, value="long")
    assert "absent needs topic 'scalar' to have a JSON value" in QualityRule(
        name="r", topic="scalar", check="absent", columns=["x"]).column_problems(topics)[0]


def test_archive_location_is_local_and_disorder_bounded() -> None:
    assert ArchiveSpec(start_date="2024-01-01", location="/data/archive").root().as_posix() == "/data/archive"
    with pytest.raises(ValidationError, match="only a local directory"):
        ArchiveSpec(start_date="2024-01-01", location="s3a://bucket/archive")
    with pytest.raises(ValidationError, match="less than or equal to 1440"):
        ArchiveSpec(start_date="2024-01-01", max_disorder_minutes=2000)


def test_reprocessing_is_local_publishes_nothing_by_default_and_needs_an_archive() -> None:
    spec = ReprocessSpec()
    assert (spec.location, spec.chunk, spec.publish, spec.publish_suffix) == (".brook/reprocessed", 1000, False,
                                                                            ".reprocessed")
    with pytest.raises(ValidationError, match="reprocess location 's3a://b/r': only a local directory"):
        ReprocessSpec(location="s3a://b/r")
    with pytest.raises(ValidationError, match="reprocessing replays the topics' archive: add an archive section"):
        PlatformSpec(version=1, default_cluster="c", clusters={"c": ClusterSpec(bootstrap_servers="127.0.0.1:9092")},
                     apps={}, topics={"t": TopicSpec(partitions=1)}, reprocess=ReprocessSpec())


def test_a_topic_can_have_its_own_disorder_bound() -> None:
    archive = ArchiveSpec(start_date="2024-03-01", max_disorder_minutes=15)
    assert TopicSpec(partitions=1).disorder_bound_minutes(archive) == 15
    assert TopicSpec(partitions=1, max_disorder_minutes=240).disorder_bound_minutes(archive) == 240
    with pytest.raises(ValidationError, match="max_disorder_minutes"):
        TopicSpec(partitions=1, max_disorder_minutes=1441)


def test_a_days_archive_is_final_after_the_largest_bound_of_any_topic() -> None:
    from assets.platform_spec import load_platform_spec, repo_root

    spec = load_platform_spec(repo_root() / "platform" / "platform.yaml")
    assert spec.archive is not None
    assert spec.archive_closing_minutes() == max(
        spec.archive.max_disorder_minutes, *(t.max_disorder_minutes or 0 for t in spec.topics.values()))


def test_a_key_given_twice_is_refused_naming_both_lines_and_the_path(tmp_path: Path) -> None:
    """Issue 16, item 17: PyYAML keeps the last of two equal keys; the spec loader refuses them."""
    from assets.platform_spec import PlatformSpecError, load_platform_spec, repo_root

    text = (repo_root() / "platform" / "platform.yaml").read_text()
    lines = text.splitlines()
    at = lines.index("  orders:", lines.index("topics:"))
    partitions = next(i for i in range(at + 1, len(lines)) if lines[i].strip().startswith("partitions:"))
    indent = lines[partitions][: len(lines[partitions]) - len(lines[partitions].lstrip())]
    lines.insert(partitions + 1, f"{indent}partitions: 8")
    path = tmp_path / "platform.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(PlatformSpecError) as error:
        load_platform_spec(path)
    assert str(error.value) == (
        f"platform spec {path}: key 'partitions' is given twice in topics.orders: line {partitions + 1} and "
        f"line {partitions + 2} (the second would silently replace the first)")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: 1\nb: 2\na: 3\n", "key 'a' is given twice in (top level): line 1 and line 3"),
        ("apps:\n  x:\n    stores:\n      - name: s\n      - name: t\n        name: u\n",
         "key 'name' is given twice in apps.x.stores[1]: line 5 and line 6"),
    ],
)
def test_duplicate_keys_anywhere_are_found(text: str, message: str) -> None:
    from streaming.yaml_files import DuplicateKeyError, load_yaml

    with pytest.raises(DuplicateKeyError, match=re.escape(message)):
        load_yaml(text)


def test_equal_looking_keys_of_different_types_and_merges_are_not_duplicates() -> None:
    from streaming.yaml_files import load_yaml

    assert load_yaml('1: a\n"1": b\n') == {1: "a", "1": "b"}
    assert load_yaml("base: &b {x: 1}\nd:\n  <<: *b\n  y: 2\n") == {"base": {"x": 1}, "d": {"x": 1, "y": 2}}


def test_a_worker_config_with_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    import typer

    from streaming.cli.settings import load_config

    path = tmp_path / "config.yaml"
    path.write_text("application.id: a\ncommit.interval.ms: 100\ncommit.interval.ms: 30000\n")
    with pytest.raises(typer.BadParameter, match=re.escape("key 'commit.interval.ms' is given twice in (top level): "
                                                           "line 2 and line 3")):
        load_config(path, [])
