"""Bad platform specs fail ``dagster definitions validate`` with the offending name in the message.

Each case writes a temp copy of ``platform/platform.yaml`` with one mistake, points the code location
at it through ``BROOK_PLATFORM_SPEC`` and runs the real CLI over the repo's ``workspace.yaml``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "platform" / "platform.yaml"
DAGSTER = Path(sys.executable).parent / "dagster"

pytestmark = pytest.mark.slow


def _rule(raw: dict[str, Any], name: str) -> dict[str, Any]:
    return next(rule for rule in raw["quality"] if rule["name"] == name)


def _validate(tmp_path: Path, raw: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    spec = tmp_path / "platform.yaml"
    spec.write_text(yaml.safe_dump(raw, sort_keys=False))
    home = tmp_path / "dagster_home"
    home.mkdir()
    env = {**os.environ, "BROOK_PLATFORM_SPEC": str(spec), "DAGSTER_HOME": str(home)}
    return subprocess.run([str(DAGSTER), "definitions", "validate", "-w", "workspace.yaml"], check=False,
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def _missing_input_topic(raw: dict[str, Any]) -> None:
    raw["apps"]["orders"]["inputs"] = ["orderz"]


def _missing_store(raw: dict[str, Any]) -> None:
    raw["apps"]["wordcount"]["stores"][0]["name"] = "word-count"


def _rule_on_missing_column(raw: dict[str, Any]) -> None:
    _rule(raw, "order_lines_complete")["columns"] = ["order_id", "quantity"]


def _rule_on_missing_topic(raw: dict[str, Any]) -> None:
    _rule(raw, "word_counts_positive")["topic"] = "word-totals"


def _row_count_on_missing_baseline(raw: dict[str, Any]) -> None:
    _rule(raw, "order_lines_cover_valid_orders")["baseline_minus"] = ["orders-refused"]


def _format_differs_from_code(raw: dict[str, Any]) -> None:
    raw["topics"]["wordcount-words"]["value"] = "long"


def _range_on_text(raw: dict[str, Any]) -> None:
    _rule(raw, "order_lines_positive_quantity")["columns"] = ["region"]


def _absent_column_declared(raw: dict[str, Any]) -> None:
    _rule(raw, "order_lines_card_never_output")["columns"] = ["qty"]  # declared, and not a string: never encrypted


@pytest.mark.parametrize(
    ("mistake", "names"),
    [
        (_missing_input_topic, ["app 'orders'", "'orderz'"]),
        (_missing_store, ["app 'wordcount'", "store 'word-count'"]),
        (_rule_on_missing_column, ["order_lines_complete", "'quantity'"]),
        (_rule_on_missing_topic, ["word_counts_positive", "'word-totals'"]),
        (_row_count_on_missing_baseline, ["order_lines_cover_valid_orders", "'orders-refused'"]),
        (_format_differs_from_code, ["'wordcount-words'", "value 'long'", "Serdes.String()"]),
        (_range_on_text, ["order_lines_positive_quantity", "'region'"]),
        (_absent_column_declared, ["order_lines_card_never_output", "'qty'", "declared as long"]),
    ],
    ids=lambda case: case.__name__.strip("_") if callable(case) else "names",
)
def test_bad_spec_fails_validate_naming_it(tmp_path: Path, mistake: Any, names: list[str]) -> None:
    raw = yaml.safe_load(SPEC.read_text())
    mistake(raw)
    result = _validate(tmp_path, raw)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    for name in names:
        assert name in output, f"{name!r} not in:\n{output}"


def test_repo_spec_passes_validate(tmp_path: Path) -> None:
    result = _validate(tmp_path, yaml.safe_load(SPEC.read_text()))
    assert result.returncode == 0, result.stdout + result.stderr
