"""``brook dlq replay APP``: put an application's dead letters back where they came from, after a fix.

Reads ``<APP>-dlq`` to its end (partition EOF, never ListOffsets) and re-injects each dead letter that
matches every ``--filter`` and was not replayed before: an ``input`` dead letter into its source topic
and partition, an ``output`` one (a production error without its input) into its output topic — with
the original timestamp and headers (``brook.error.*`` removed; see ``streaming.runtime.dead_letters``).
A ``none`` dead letter (a record a cache flush or a punctuator forwarded: no key or value) is not
replayable; it is counted apart.

Safe to run twice: every replayed dead letter is recorded in ``<APP>-dlq-replayed`` (key
``<partition>:<offset>`` of the dead letter, value: where it went), written only after the replays are
acknowledged, and read first on every run. A crash between the two writes replays those letters again on
the next run (at-least-once, like the app itself). ``--dry-run`` prints what would be replayed and
writes nothing.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from confluent_kafka import OFFSET_BEGINNING, Producer

from streaming.admin import create_topics, read_to_end
from streaming.cli.connection import BootstrapOption, ConfigOption, SetOption, client_config
from streaming.naming import dead_letter_topic, replayed_dead_letters_topic
from streaming.runtime.cluster import cluster_metadata
from streaming.runtime.dead_letters import error_headers, original_headers

app = typer.Typer(rich_markup_mode=None, no_args_is_help=True,
                  help="Dead letters (<application.id>-dlq): replay them after a fix.")

def _filters(specs: list[str] | None) -> dict[str, str]:
    filters = {}
    for spec in specs or []:
        key, eq, value = spec.partition("=")
        if not eq or not key.strip():
            raise typer.BadParameter(f"{spec!r}: expected KEY=VALUE, e.g. stage=processing, type=KeyError, "
                                     f"source.topic=orders", param_hint="--filter")
        filters[key.strip().removeprefix("brook.error.")] = value
    return filters


def _matches(error: dict[str, str], filters: dict[str, str]) -> bool:
    for key, wanted in filters.items():
        found = error.get(key)
        if found is None:
            return False
        if key == "type" and found.rsplit(".", 1)[-1] == wanted:
            continue
        if found != wanted:
            return False
    return True


def _records(settings: dict[str, Any], topic: str, partitions: list[int]) -> list[Any]:
    """Every record of ``topic``, from the beginning to its end."""
    return list(read_to_end(settings, [(topic, p, OFFSET_BEGINNING) for p in partitions], timeout=None))


def _target(error: dict[str, str], partitions: dict[str, int]) -> tuple[str, int]:
    """Where a dead letter goes back to: ``(topic, partition)``; partition -1 lets the partitioner choose."""
    if error.get("record") == "output":
        topic, partition = error.get("output.topic", ""), int(error.get("output.partition", "-1"))
    else:
        topic, partition = error.get("source.topic", ""), int(error.get("source.partition", "-1"))
    if not topic:
        raise RuntimeError(f"dead letter without a {'output' if error.get('record') == 'output' else 'source'} "
                           f"topic header: {error}")
    if topic not in partitions:
        raise RuntimeError(f"dead letter's target topic {topic!r} does not exist (create it first)")
    return topic, partition if 0 <= partition < partitions[topic] else -1


@app.command()
def replay(
    application_id: Annotated[str, typer.Argument(help="The application.id whose dead letters to replay.")],
    filters: Annotated[list[str] | None, typer.Option(
        "--filter", help="Only dead letters whose brook.error.<KEY> header is VALUE (repeat: all must match), "
        "e.g. stage=processing, type=KeyError (or the full module.Class), source.topic=orders.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would be replayed; write nothing.")] = False,
    bootstrap: BootstrapOption = None, config: ConfigOption = None, overrides: SetOption = None,
) -> None:
    """Re-inject APP's dead letters into their source topics (after a fix), each at most once."""
    wanted = _filters(filters)
    settings = client_config(bootstrap, config, overrides)
    dlq, ledger = dead_letter_topic(application_id), replayed_dead_letters_topic(application_id)
    metadata = cluster_metadata(settings).topics
    partitions = {name: len(t.partitions) for name, t in metadata.items() if t.error is None}
    if dlq not in partitions:
        raise typer.BadParameter(f"topic {dlq!r} does not exist on {settings['bootstrap.servers']}: application "
                                 f"{application_id!r} never ran with a dead_letter handler", param_hint="APP")
    done = set()
    if ledger in partitions:
        done = {m.key().decode() for m in _records(settings, ledger, list(range(partitions[ledger])))}
    letters = _records(settings, dlq, list(range(partitions[dlq])))
    chosen, replayed_before, not_matching, not_replayable = [], 0, 0, 0
    for letter in letters:
        error = error_headers(letter.headers())
        if f"{letter.partition()}:{letter.offset()}" in done:
            replayed_before += 1
        elif not _matches(error, wanted):
            not_matching += 1
        elif error.get("record") == "none":
            not_replayable += 1
        else:
            chosen.append((letter, error, _target(error, partitions)))
    for letter, error, (topic, partition) in chosen:
        if dry_run:
            typer.echo(f"would replay {dlq}[{letter.partition()}]@{letter.offset()} -> {topic}"
                       f"[{'any' if partition < 0 else partition}]  {error.get('stage')} {error.get('type')}: "
                       f"{error.get('message', '')[:120]}")
    if chosen and not dry_run:
        _replay(settings, chosen, ledger, ledger not in partitions)
    verb = "would replay" if dry_run else "replayed"
    typer.echo(f"{verb} {len(chosen)} dead letters from {dlq} ({replayed_before} replayed before, "
               f"{not_matching} not matching the filter, {not_replayable} not replayable: record=none, a record a "
               f"cache flush or punctuator forwarded)", err=True)


def _replay(settings: dict[str, Any], chosen: list[tuple[Any, dict[str, str], tuple[str, int]]], ledger: str,
            create_ledger: bool) -> None:
    """Produce the replays, wait for every acknowledgement, then record them in the ledger."""
    if create_ledger:
        create_topics(settings["bootstrap.servers"], {ledger: 1}, configs={ledger: {"cleanup.policy": "delete"}},
                      client_config=settings)
    failures: list[str] = []
    landed: dict[tuple[int, int], str] = {}

    def delivered(key: tuple[int, int]) -> Any:
        def report(error: Any, message: Any) -> None:
            if error is not None:
                failures.append(f"{message.topic()}: {error}")
            else:
                landed[key] = f"{message.topic()}[{message.partition()}]@{message.offset()}"
        return report

    producer = Producer({**settings, "partitioner": "murmur2_random", "enable.idempotence": True, "linger.ms": 5})
    for letter, _, (topic, partition) in chosen:
        extra: dict[str, Any] = {"timestamp": letter.timestamp()[1], "headers": original_headers(letter.headers())}
        if partition >= 0:
            extra["partition"] = partition
        producer.produce(topic, letter.value(), letter.key(),
                         on_delivery=delivered((letter.partition(), letter.offset())), **extra)
        producer.poll(0)
    if producer.flush(60) or failures:
        raise RuntimeError(f"{len(failures) or 'some'} replays were not acknowledged (nothing recorded as replayed; "
                           f"run again): {failures[0] if failures else 'timed out'}")
    for (partition, offset), where in landed.items():
        producer.produce(ledger, json.dumps({"to": where}).encode(), f"{partition}:{offset}".encode(),
                         on_delivery=lambda error, message: failures.append(str(error)) if error else None)
    if producer.flush(30) or failures:
        raise RuntimeError(f"replayed {len(landed)} dead letters but could not record them in {ledger} "
                           f"(a second run would replay them again): {failures[0] if failures else 'timed out'}")
    for _, where in sorted(landed.items()):
        typer.echo(f"replayed -> {where}")
