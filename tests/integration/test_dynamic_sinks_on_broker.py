"""A dynamic sink on the embedded broker (issue 19, item 5): ``KStream.to(extractor)`` routes each line to the topic
of its category; a line whose category has no topic goes down the production error path, naming the topic, and the
topic is never created.

The embedded broker creates a topic when a producer sends to it, and even when a metadata request names it
(measured: both give a 4-partition topic), so the sink's check against the cluster's topic list (read whole) is
what keeps the missing topic missing; the test reads the list whole too.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from streaming import KafkaStreams, ProductionError, Serdes, StreamsBuilder
from streaming.admin import create_topics, partition_counts
from streaming.naming import dead_letter_topic
from streaming.processor import RecordContext
from streaming.runtime.dead_letters import error_headers
from streaming.runtime.kafka_streams import State
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import committed_offsets, produce, read_topic, wait_for

pytestmark = pytest.mark.integration
PARTITIONS = 2
COUNT = 24
UNROUTABLE = {5, 17}  # the ids whose category ("garden") has no topic


def category(i: int) -> str:
    return "garden" if i in UNROUTABLE else ("books" if i % 2 else "toys")


def by_category(key: Any, value: Any, context: RecordContext) -> str:
    """``<input topic>-<category>``: the record context names the topic the line was read from."""
    return f"{context.topic}-{value['category']}"


def routing(source: str) -> Any:
    builder = StreamsBuilder()
    (builder.stream(source, key_serde=Serdes.String(), value_serde=Serdes.Json())
     .map_values(lambda value: {**value, "routed": True})
     .to(by_category, value_serde=Serdes.Json()))
    return builder.build()


def test_lines_go_to_the_topic_of_their_category_and_a_missing_topic_is_never_created(
        bootstrap: str, unique_name: str) -> None:
    handlers = {"fail": "fail", "dlq": "dead_letter"}
    sources = {name: f"{unique_name}-{name}-lines" for name in handlers}
    create_topics(bootstrap, {topic: PARTITIONS for source in sources.values()
                              for topic in (source, f"{source}-books", f"{source}-toys")})
    places = {}
    for name, source in sources.items():
        produce(bootstrap, source, [GeneratedRecord(f"line-{i}", {"id": i, "category": category(i)}, 1_000_000 + i)
                                    for i in range(COUNT)], Serdes.String(), Serdes.Json())
        places[name] = {r.value["id"]: (r.partition, r.offset)
                        for r in read_topic(bootstrap, source, Serdes.String(), Serdes.Json(), PARTITIONS)}
    apps = {name: KafkaStreams(routing(sources[name]), {
        "application.id": f"{unique_name}-{name}", "bootstrap.servers": bootstrap, "commit.interval.ms": 200,
        "production.exception.handler": handler}) for name, handler in handlers.items()}

    def routed(name: str, cat: str) -> list[int]:
        return sorted(r.value["id"] for r in read_topic(bootstrap, f"{sources[name]}-{cat}", Serdes.String(),
                                                         Serdes.Json(), PARTITIONS))

    def ids(cat: str) -> list[int]:
        return [i for i in range(COUNT) if category(i) == cat]

    for app in apps.values():
        app.start()
    try:
        wait_for(lambda: apps["fail"].state is State.ERROR
                 and routed("dlq", "books") == ids("books") and routed("dlq", "toys") == ids("toys"), 90,
                 "the failing app to stop and the dead-lettering one to route every other line")
        assert apps["dlq"].state is not State.ERROR
        metrics = apps["dlq"].metrics()
    finally:
        for app in apps.values():
            app.close(30)

    # Never created, by either app (the topic list, read whole, creates nothing).
    missing = {f"{source}-garden" for source in sources.values()}
    assert partition_counts(bootstrap, missing) == dict.fromkeys(missing)

    # dead_letter: every routable line in its category's topic, each unroutable one a dead letter naming the topic.
    source = sources["dlq"]
    letters = read_topic(bootstrap, dead_letter_topic(f"{unique_name}-dlq"), Serdes.String(), Serdes.Bytes(), 1)
    assert sorted(json.loads(letter.value)["id"] for letter in letters) == sorted(UNROUTABLE)
    for letter in letters:
        i = json.loads(letter.value)["id"]
        partition, offset = places["dlq"][i]
        headers = error_headers(letter.headers)
        assert (headers["stage"], headers["source.topic"], headers["source.partition"], headers["source.offset"],
                headers["output.topic"]) == ("production", source, str(partition), str(offset), f"{source}-garden")
        assert headers["message"] == (
            f"sink 'KSTREAM-SINK-0000000002': the topic name extractor chose topic '{source}-garden', which does not "
            f"exist on the cluster (a dynamic sink's topics are never created: create it first); key 'line-{i}' "
            f"(output of the record at topic '{source}' partition {partition} offset {offset}, task 0_{partition})")
    assert metrics["dead_letter_records"] == len(UNROUTABLE)

    # fail: the first unroutable line of a partition stops the app, naming it; nothing committed past it.
    source = sources["fail"]
    error = apps["fail"].exception
    assert isinstance(error, ProductionError), error
    assert f"chose topic '{source}-garden', which does not exist on the cluster" in str(error)
    i = next(i for i in UNROUTABLE if f"key 'line-{i}' " in str(error))
    partition, offset = places["fail"][i]
    assert str(error).endswith(f"(output of the record at topic '{source}' partition {partition} offset {offset}, "
                               f"task 0_{partition})")
    assert committed_offsets(bootstrap, f"{unique_name}-fail", source, PARTITIONS)[partition] <= offset
