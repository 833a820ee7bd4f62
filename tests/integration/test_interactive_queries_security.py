"""The interactive-query endpoint over HTTPS with a bearer token, on two instances: requests without the
token get 401, plain HTTP gets nothing, and ``KafkaStreams.query`` asks the owning instance with the
token, trusting the configured CA; the token is redacted and never logged."""

from __future__ import annotations

import http.client
import json
import logging
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from streaming import KafkaStreams, Serdes, StreamsConfig
from streaming.admin import create_topics
from streaming.runtime.remote_queries import RemoteQueries
from streaming.testing.kafka import produce, wait_for
from streaming.testing.tls import make_authority
from tests.integration.test_interactive_queries import (
    PARTITIONS,
    STORE,
    counting_topology,
    free_port,
    local_counts,
    records,
)

pytestmark = pytest.mark.integration
TOKEN = "iq-token-5be1d0"  # a test credential that must never be shown


def https_get(host: str, path: str, ca: Path, token: str | None) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(f"https://{host}{path}")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    context = ssl.create_default_context(cafile=str(ca))
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_https_and_a_token_between_two_instances(bootstrap: str, unique_name: str, tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    authority = make_authority(tmp_path / "tls")
    topic = f"{unique_name}-in"
    create_topics(bootstrap, {topic: PARTITIONS})
    generated, oracle = records(300)
    produce(bootstrap, topic, generated, Serdes.String(), Serdes.String())
    ports = free_port(), free_port()
    while ports[0] == ports[1]:
        ports = ports[0], free_port()
    hosts = [f"127.0.0.1:{port}" for port in ports]

    def config(name: str, port: int) -> dict[str, Any]:
        return {"application.id": unique_name, "bootstrap.servers": bootstrap, "commit.interval.ms": 200,
                "state.dir": str(tmp_path / name), "application.server": f"127.0.0.1:{port}",
                "application.server.tls.cert": str(authority.certificate),
                "application.server.tls.key": str(authority.key),
                "application.server.tls.ca": str(authority.ca), "application.server.token": TOKEN}

    a = KafkaStreams(counting_topology(topic), config("a", ports[0]))
    b = KafkaStreams(counting_topology(topic), config("b", ports[1]))
    assert a.config.redacted()["application.server.token"] == "***"
    caplog.set_level(logging.DEBUG)
    a.start()
    b.start()
    try:
        def settled() -> bool:
            counts_a, counts_b = local_counts(a), local_counts(b)
            return bool(counts_a) and bool(counts_b) and {**counts_a, **counts_b} == oracle

        wait_for(settled, 90, "both instances to hold every count between them")
        keys = sorted(oracle)

        def every_key_answers() -> bool:
            try:
                return all(a.query(STORE, key) == oracle[key] and b.query(STORE, key) == oracle[key] for key in keys)
            except Exception:  # rebalancing or announcements not read yet: retried  # noqa: BLE001
                return False

        wait_for(every_key_answers, 30, "KafkaStreams.query to answer every key on both instances")
        assert a.query(STORE, "no-such-user") is None and b.query(STORE, "no-such-user") is None
        remote_keys = [key for key in keys if a.metadata_for_key(STORE, key).active_host == hosts[1]]
        assert remote_keys, "instance b should own some keys, asked by a over HTTPS"

        key = remote_keys[0]
        path = f"/stores/{STORE}/{quote(key)}"
        assert https_get(hosts[1], path, authority.ca, TOKEN)[0] == 200
        status, body = https_get(hosts[1], path, authority.ca, None)
        assert (status, body["error"]) == (401, "unauthorized")
        assert https_get(hosts[1], path, authority.ca, "not-the-token")[0] == 401
        assert https_get(hosts[1], "/health", authority.ca, None)[0] == 401
        status, body = https_get(hosts[0], path, authority.ca, TOKEN)
        assert status == 421 and body["url"].startswith(f"https://{hosts[1]}/")
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):  # another CA: not trusted
            https_get(hosts[1], path, make_authority(tmp_path / "other").ca, TOKEN)
        plain = http.client.HTTPConnection(*hosts[1].split(":"), timeout=5)
        with pytest.raises((http.client.HTTPException, OSError)):  # plain HTTP on the HTTPS port
            plain.request("GET", path)
            plain.getresponse()
        wrong_token = RemoteQueries(StreamsConfig({**config("c", free_port()), "application.server.token": "x"}))
        assert wrong_token.get(hosts[1], STORE, key)[0] == 401
    finally:
        assert a.close(30) and b.close(30)
    assert a.exception is None and b.exception is None
    assert not any(TOKEN in record.getMessage() for record in caplog.records)
