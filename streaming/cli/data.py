"""``brook produce`` and ``brook consume``: write a few records, read a topic (connection: see
``streaming.cli.connection``).

Records are written with the Java client's partitioner (``murmur2_random``), so a key lands where a
Kafka Streams or Java producer would put it, and read without a consumer group (nothing is committed).
Keys and values go through serdes named as in the config (``String``, ``Json``, ``Long``, ``Integer``,
``Double``, ``Bytes`` or ``module:attr``).
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, TextIO

import typer
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from streaming.admin import watermarks
from streaming.cli.connection import BootstrapOption, ConfigOption, SetOption, client_config
from streaming.runtime.cluster import cluster_metadata
from streaming.serdes import BytesSerde, JsonSerde, Serde, StringSerde, resolve_serde

KeySerdeOption = Annotated[str, typer.Option("--key-serde", help="Serde of the keys (default String).")]
ValueSerdeOption = Annotated[str, typer.Option("--value-serde", help="Serde of the values (default Json).")]


def _serde(name: str, option: str) -> Serde[Any]:
    try:
        return resolve_serde(name)
    except (ValueError, ImportError, AttributeError) as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None


def _from_text(text: str, serde: Serde[Any], option: str) -> Any:
    """The object a serde takes, from how it is written on a line (JSON for Json and numbers)."""
    if isinstance(serde, StringSerde):
        return text
    if isinstance(serde, BytesSerde):
        return text.encode()
    try:
        return json.loads(text)
    except ValueError:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise ValueError(f"{shown!r} is not JSON, which {option} {type(serde).__name__.removesuffix('Serde')} "
                         f"reads; plain text needs {option} String") from None


def _records(lines: TextIO, fmt: str, key_serde: Serde[Any], value_serde: Serde[Any]) -> Any:
    for number, line in enumerate(lines, start=1):
        line = line.rstrip("\n")
        if not line.strip():
            continue
        try:
            if fmt == "json":
                try:
                    record = json.loads(line)
                except ValueError:
                    raise ValueError("not JSON: --format json reads one object per line like "
                                     '{"key": ..., "value": ..., "timestamp": ms}') from None
                if not isinstance(record, dict) or "value" not in record:
                    raise ValueError('expected an object like {"key": ..., "value": ..., "timestamp": ms}')
                yield record.get("key"), record["value"], record.get("timestamp"), record.get("headers")
            else:
                key_text, tab, value_text = line.partition("\t")
                if not tab:
                    key_text, value_text = "", line
                key = _from_text(key_text, key_serde, "--key-serde") if key_text else None
                yield key, _from_text(value_text, value_serde, "--value-serde"), None, None
        except ValueError as exc:
            raise typer.BadParameter(f"line {number}: {exc}", param_hint="input") from None


def produce(
    topic: Annotated[str, typer.Argument(help="The topic to write to.")],
    file: Annotated[Path | None, typer.Option("--file", "-f", exists=True, dir_okay=False,
                                              help="Read records from this file (default: stdin).")] = None,
    fmt: Annotated[str, typer.Option("--format", help="tsv: 'key<TAB>value' lines (a line without a tab has "
                                     "no key); json: objects with key, value, timestamp, headers.")] = "tsv",
    key_serde: KeySerdeOption = "String", value_serde: ValueSerdeOption = "Json",
    bootstrap: BootstrapOption = None, config: ConfigOption = None, overrides: SetOption = None,
) -> None:
    """Write records read from stdin or a file to TOPIC."""
    if fmt not in ("tsv", "json"):
        raise typer.BadParameter("must be tsv or json", param_hint="--format")
    settings = client_config(bootstrap, config, overrides)
    _check_topic(settings, topic)
    keys, values = _serde(key_serde, "--key-serde"), _serde(value_serde, "--value-serde")
    failures: list[str] = []
    producer = Producer({**settings, "partitioner": "murmur2_random", "linger.ms": 5})
    count = 0
    with (open(file) if file is not None else sys.stdin) as lines:
        for key, value, timestamp, headers in _records(lines, fmt, keys, values):
            extra: dict[str, Any] = {}
            if timestamp is not None:
                extra["timestamp"] = int(timestamp)
            if headers:
                extra["headers"] = {k: None if v is None else str(v).encode() for k, v in headers.items()}
            producer.produce(topic, values.serialize(value), keys.serialize(key),
                             on_delivery=lambda err, msg: failures.append(str(err)) if err else None, **extra)
            count += 1
            producer.poll(0)
    if producer.flush(30) or failures:
        raise RuntimeError(f"{len(failures) or 'some'} records to {topic} were not acknowledged: "
                           f"{failures[0] if failures else 'timed out'}")
    typer.echo(f"produced {count} records to {topic}", err=True)


def consume(
    topic: Annotated[str, typer.Argument(help="The topic to read.")],
    from_beginning: Annotated[bool, typer.Option("--from-beginning", help="Start at the earliest offset "
                                                 "(default: the end, so only new records show).")] = False,
    max_records: Annotated[int | None, typer.Option("--max", min=1, help="Stop after this many records.")] = None,
    follow: Annotated[bool, typer.Option("--follow", help="Keep waiting for records (default: stop at the "
                                         "end of every partition).")] = False,
    fmt: Annotated[str, typer.Option("--format", help="text: one line per record; json: a JSON object per "
                                     "record.")] = "text",
    key_serde: KeySerdeOption = "String", value_serde: ValueSerdeOption = "Json",
    bootstrap: BootstrapOption = None, config: ConfigOption = None, overrides: SetOption = None,
) -> None:
    """Print TOPIC's records: partition, offset, timestamp, key and value."""
    if fmt not in ("text", "json"):
        raise typer.BadParameter("must be text or json", param_hint="--format")
    settings = client_config(bootstrap, config, overrides)
    partitions = _check_topic(settings, topic)
    keys, values = _serde(key_serde, "--key-serde"), _serde(value_serde, "--value-serde")
    consumer = Consumer({**settings, "group.id": "brook-consume", "enable.auto.commit": False,
                         "enable.partition.eof": True, "fetch.wait.max.ms": 100, "fetch.queue.backoff.ms": 10})
    if from_beginning:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    else:  # the exact end (ListOffsets "latest", which OFFSET_END uses, is wrong on the embedded broker)
        ends = watermarks(settings["bootstrap.servers"], [(topic, p) for p in partitions], client_config=settings)
        consumer.assign([TopicPartition(topic, p, ends[(topic, p)][1]) for p in partitions])
    at_end: set[int] = set()
    shown = undecodable = 0
    try:
        while (follow or len(at_end) < len(partitions)) and (max_records is None or shown < max_records):
            for message in consumer.consume(500, 0.5):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        at_end.add(message.partition())
                        continue
                    raise RuntimeError(f"reading {topic}[{message.partition()}]: {error.str()}")
                at_end.discard(message.partition())
                try:
                    line = _show(message, keys, values, fmt)
                except Exception as exc:  # noqa: BLE001 - any serde failure: show the raw record and go on
                    line = _show_undecodable(message, exc, fmt)
                    undecodable += 1
                typer.echo(line)
                shown += 1
                if max_records is not None and shown >= max_records:
                    break
    finally:
        consumer.close()
    if undecodable:
        typer.echo(f"{undecodable} of {shown} records could not be decoded with --key-serde {key_serde} "
                   f"--value-serde {value_serde}: shown raw", err=True)


def _show(message: Any, keys: Serde[Any], values: Serde[Any], fmt: str) -> str:
    key, value = keys.deserialize(message.key()), values.deserialize(message.value())
    timestamp = message.timestamp()[1]
    if fmt == "json":
        return json.dumps({"partition": message.partition(), "offset": message.offset(), "timestamp": timestamp,
                           "key": _jsonable(key), "value": _jsonable(value)})
    when = datetime.fromtimestamp(timestamp / 1000, tz=UTC).isoformat(timespec="milliseconds") \
        if timestamp >= 0 else "-"
    shown = json.dumps(_jsonable(value)) if isinstance(values, JsonSerde) else value
    return f"p{message.partition()} @{message.offset()} {when}  {key}\t{shown}"


def _show_undecodable(message: Any, exc: Exception, fmt: str) -> str:
    """A record the serdes cannot read: where it is, why, and its raw key and value bytes."""
    reason = (str(exc).splitlines() or [type(exc).__name__])[0]
    if fmt == "json":
        return json.dumps({"partition": message.partition(), "offset": message.offset(), "undecodable": reason,
                           "raw_key": _raw(message.key()), "raw_value": _raw(message.value())})
    return (f"p{message.partition()} @{message.offset()} undecodable ({reason}): key {_raw(message.key())} "
            f"value {_raw(message.value())}")


def _raw(data: bytes | None) -> str | None:
    """Bytes as a Python literal, cut at 200 bytes."""
    if data is None:
        return None
    return repr(data[:200]) + (f"... ({len(data)} bytes)" if len(data) > 200 else "")


def _jsonable(value: Any) -> Any:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _check_topic(settings: dict[str, Any], topic: str) -> list[int]:
    found = cluster_metadata(settings).topics.get(topic)
    if found is None or found.error is not None:
        raise typer.BadParameter(f"topic {topic!r} does not exist on {settings['bootstrap.servers']} "
                                 f"(brook topics create {topic} --partitions N)", param_hint="TOPIC")
    return sorted(found.partitions)
