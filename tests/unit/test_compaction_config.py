"""Configuration of compaction: the spec's snapshots section, the Spark conf file, truncation refusal."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from assets.platform_spec import PlatformSpecError, SnapshotsSpec, load_platform_spec
from assets.resources import spark_resource
from assets.spark.session import SparkConfError, read_spark_defaults
from assets.truncation import delete_records_refusal

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "platform" / "platform.yaml"


def test_snapshot_location_defaults_and_resolution() -> None:
    spec = load_platform_spec(SPEC)
    assert spec.snapshots == SnapshotsSpec(location=".brook/snapshots", keep=3)
    root = Path("/repo")
    assert SnapshotsSpec().resolved_location(root) == "/repo/.brook/snapshots"
    for absolute in ("/data/snapshots", "s3a://bucket/brook", "hdfs://nn:8020/brook", "file:///x"):
        assert SnapshotsSpec(location=absolute).resolved_location(root) == absolute


@pytest.mark.parametrize(("snapshots", "message"), [
    ({"keep": 0}, "greater than 0"),
    ({"location": ""}, "at least 1 character"),
    ({"path": "/x"}, "Extra inputs are not permitted"),
])
def test_bad_snapshots_section_fails_loading(tmp_path: Path, snapshots: dict, message: str) -> None:
    raw = yaml.safe_load(SPEC.read_text())
    raw["snapshots"] = snapshots
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(PlatformSpecError, match=message):
        load_platform_spec(path)


def test_spark_conf_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = read_spark_defaults(ROOT / "platform" / "spark" / "spark-defaults.conf")
    assert conf["spark.master"] == "local[*]" and conf["spark.sql.shuffle.partitions"] == "4"
    bad = tmp_path / "bad.conf"
    bad.write_text("# comment\nspark.master   local[2]\nspark.ui.enabled\n")
    with pytest.raises(SparkConfError, match=r"bad.conf:3: expected 'key value', got 'spark.ui.enabled'"):
        read_spark_defaults(bad)
    with pytest.raises(SparkConfError, match="cannot read Spark conf"):
        read_spark_defaults(tmp_path / "missing.conf")
    good = tmp_path / "good.conf"
    good.write_text("spark.master spark://spark-master:7077\n")
    monkeypatch.setenv("BROOK_SPARK_CONF", str(good))
    assert spark_resource().spark_config == {"spark.master": "spark://spark-master:7077"}
    monkeypatch.setenv("BROOK_SPARK_MASTER", "spark://other-master:7077")  # wins over the file's spark.master
    assert spark_resource().spark_config == {"spark.master": "spark://other-master:7077"}
    monkeypatch.delenv("BROOK_SPARK_CONF")
    assert spark_resource().spark_config == {**conf, "spark.master": "spark://other-master:7077"}


def test_truncation_is_refused_on_a_cluster_declared_embedded_without_asking_it() -> None:
    # No broker listens on port 9: the declared flag alone decides, nothing is sent.
    reason = delete_records_refusal({"bootstrap.servers": "127.0.0.1:9"}, cluster="embedded", declared_embedded=True)
    assert reason is not None
    assert "cluster 'embedded' is declared 'embedded: true'" in reason and "cannot delete records" in reason
