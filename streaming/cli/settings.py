"""The settings a ``brook`` command runs with: a config file, the ``BROOK_<KEY>`` environment, ``--set`` overrides,
and ``bootstrap.servers`` chosen in the one order of :mod:`streaming.bootstrap`.

Config files are YAML (or JSON) with Kafka Streams keys; ``BROOK_<KEY>`` environment variables set keys
(``BROOK_BOOTSTRAP_SERVERS``, ``BROOK_SASL_PASSWORD``), ``--set key=value`` overrides single keys, and values may
refer to ``${env:NAME}`` / ``${file:/path}``. A ``--set`` key that is no config key is refused, naming the nearest.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import typer
import yaml

from streaming.bootstrap import Bootstrap, resolve_bootstrap
from streaming.config import KEYS, is_config_key
from streaming.config_sources import environment_config
from streaming.yaml_files import load_yaml


def read_config_file(path: Path | None) -> dict[str, Any]:
    """The keys of a YAML/JSON config file (empty without one); a bad file is a one-line ``--config`` error."""
    if path is None:
        return {}
    try:
        loaded = load_yaml(path.read_text()) or {}
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise typer.BadParameter(f"{path} is not valid YAML{at}: {problem}", param_hint="--config") from None
    if not isinstance(loaded, dict):
        raise typer.BadParameter(f"{path} must hold a mapping of config keys", param_hint="--config")
    return loaded


def parse_overrides(overrides: list[str]) -> dict[str, str]:
    """``--set key=value`` items as keys; a malformed item or a key that is no config key is refused."""
    parsed: dict[str, str] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise typer.BadParameter(f"expected key=value, got {item!r}", param_hint="--set")
        if not is_config_key(key):
            close = difflib.get_close_matches(key, list(KEYS), n=1)
            hint = f": did you mean '{close[0]}'?" if close else " (librdkafka settings take a 'consumer.', " \
                                                                  "'producer.' or 'admin.' prefix)"
            raise typer.BadParameter(f"unknown config key {key!r}{hint}", param_hint="--set")
        parsed[key] = value
    return parsed


def load_config(path: Path | None, overrides: list[str]) -> dict[str, Any]:
    """Streams config from a YAML/JSON file, then ``BROOK_<KEY>`` environment variables (e.g.
    ``BROOK_BOOTSTRAP_SERVERS``, ``BROOK_SASL_PASSWORD``), then ``key=value`` overrides. Values may refer to
    ``${env:NAME}`` or ``${file:/path}`` (secrets never need to be on the command line)."""
    return {**read_config_file(path), **environment_config(is_config_key), **parse_overrides(overrides)}


def load_settings(path: Path | None, overrides: list[str],
                  bootstrap_flag: str | None = None) -> tuple[dict[str, Any], Bootstrap]:
    """:func:`load_config` with ``bootstrap.servers`` set in the order of :mod:`streaming.bootstrap` (a
    ``--bootstrap-servers`` flag first, then ``--set``), and where it came from."""
    set_by_flag = parse_overrides(overrides).get("bootstrap.servers")
    chosen = resolve_bootstrap(bootstrap_flag or set_by_flag,
                               flag_name="--bootstrap-servers" if bootstrap_flag else "--set bootstrap.servers",
                               config=read_config_file(path), config_name=f"config file {path}")
    return {**load_config(path, overrides), "bootstrap.servers": chosen.servers}, chosen
