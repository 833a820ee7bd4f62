"""Where config values come from besides the config itself: references and the environment.

- **References** in any string value, as Kafka's config providers write them: ``${env:NAME}`` is the
  environment variable ``NAME``, ``${file:/path}`` the content of a file (trailing newline stripped).
  ``sasl.password: ${file:/run/secrets/kafka-password}`` keeps the secret out of the config file, the
  command line and ``ps``. A missing variable or unreadable file fails naming the key and the reference.
- **The environment**: ``BROOK_<KEY>`` sets config key ``<key>``, dots written as underscores
  (``BROOK_SASL_PASSWORD`` -> ``sasl.password``, ``BROOK_CONSUMER_FETCH_MAX_BYTES`` ->
  ``consumer.fetch.max.bytes``). Only names that map to a config key count; ``BROOK_DEBUG`` and the
  platform's own variables are left alone. ``brook worker run`` reads them between the config file
  and ``--set``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from streaming.errors import ConfigError

ENV_PREFIX = "BROOK_"
_REFERENCE = re.compile(r"\$\{(env|file):([^}]+)\}")


def resolve_references(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with every ``${env:NAME}`` and ``${file:/path}`` in its string values replaced."""
    return {key: _resolve(key, value) if isinstance(value, str) and "${" in value else value
            for key, value in config.items()}


def _resolve(key: str, value: str) -> str:
    def replace(match: re.Match[str]) -> str:
        provider, name = match.group(1), match.group(2).strip()
        if provider == "env":
            if name not in os.environ:
                raise ConfigError(f"config key '{key}' refers to ${{env:{name}}}, but environment variable "
                                  f"{name} is not set")
            return os.environ[name]
        try:
            return Path(name).read_text().rstrip("\n")
        except OSError as exc:
            raise ConfigError(f"config key '{key}' refers to ${{file:{name}}}, which cannot be read: "
                              f"{exc.strerror or exc}") from None
    return _REFERENCE.sub(replace, value)


def environment_config(is_config_key: Any, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Config keys set by ``BROOK_<KEY>`` environment variables (see the module doc).

    ``is_config_key(key)`` says whether a dotted name is a config key (the config's own rule)."""
    found: dict[str, str] = {}
    for name, value in (os.environ if environ is None else environ).items():
        if not name.startswith(ENV_PREFIX) or name == ENV_PREFIX:
            continue
        key = name[len(ENV_PREFIX):].lower().replace("_", ".")
        if is_config_key(key):
            found[key] = value
    return found
